"""Draining on SIGTERM: keep serving for a few seconds while ``/readyz`` fails, then stop.

When Kubernetes deletes a webhook pod (a rolling update, a drain), it sends SIGTERM and removes the pod from the
Service's endpoints at the same time, and the endpoint change takes a moment to reach every API server. A
server that stopped accepting at once would have calls routed to it meanwhile, each admitted unchecked under
``failurePolicy: Ignore``. So the gunicorn master, on the first SIGTERM, only marks the server as draining
(``/readyz`` answers 503, so no new traffic is sent its way) and goes on serving for
``AI_ADMISSION_DRAIN_SECONDS`` (5 by default); then it stops gracefully as gunicorn does (in-flight requests
finish within ``graceful_timeout``). A second SIGTERM stops at once; SIGINT (Ctrl-C) and SIGQUIT are unchanged.
The Deployment's ``terminationGracePeriodSeconds`` covers both waits.

The workers learn of the drain from a flag file (its path in ``AI_ADMISSION_DRAIN_FLAG``, set by the master for
its workers), read only by ``/readyz``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

FLAG_ENV = "AI_ADMISSION_DRAIN_FLAG"  # set by the master for its workers (see webhook.config.settings)
GRACEFUL_SECONDS = 10  # then, gunicorn's graceful_timeout: requests in flight may take this long to finish


def is_draining(flag: str | None) -> bool:
    """Whether the master has begun draining (``flag``: the settings' drain flag file)."""
    return flag is not None and flag != "" and os.path.exists(flag)


def drain_on_term(server: Any, flag: Path, seconds: float) -> None:
    """Make the gunicorn master ``server`` drain for ``seconds`` on its first SIGTERM before it stops.

    gunicorn's main loop calls ``handle_term`` for SIGTERM and ``murder_workers`` at least once a second; the
    first is replaced by "start draining", the second also ends the loop once the drain is over (StopIteration
    is how gunicorn's own SIGTERM handler stops it).
    """
    stop_now = server.handle_term
    murder_workers = server.murder_workers
    deadline: list[float] = []

    def handle_term() -> None:
        if deadline or seconds <= 0:
            stop_now()
        flag.touch()
        deadline.append(time.monotonic() + seconds)
        server.log.info(json.dumps({"msg": "draining: /readyz fails, still serving", "seconds": seconds}))

    def murder_workers_then_maybe_stop() -> None:
        murder_workers()
        if deadline and time.monotonic() >= deadline[0]:
            server.log.info(json.dumps({"msg": "drained, stopping"}))
            stop_now()

    server.handle_term = handle_term
    server.murder_workers = murder_workers_then_maybe_stop
