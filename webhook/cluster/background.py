"""A background poll: a daemon thread that calls one method every ``interval`` seconds until stopped.

For what is not a collection to watch (a changed rules file, a PolicyReport refresh that is due); collections of
the cluster are watched by `webhook.cluster.informer`. Never on the request path. `ProblemLog`: how the writers
among them say that they cannot write.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TypeVar

log = logging.getLogger("ai_admission")
Self = TypeVar("Self", bound="Poller")


class ProblemLog:
    """What stops a poll's writes, logged once and its end once (``what``: what is not written), not at every
    poll; ``last`` is the problem now, None when there is none."""

    def __init__(self, what: str) -> None:
        self._what = what
        self.last: str | None = None

    def __call__(self, text: str | None) -> None:
        if text != self.last:
            log.warning(json.dumps({"msg": f"{self._what} not written", "reason": text} if text else
                                   {"msg": f"{self._what} written again"}))
        self.last = text


class Poller:
    """Subclasses implement `poll`; ``immediately`` runs the first poll at start instead of after a wait; `wake`
    runs the next poll now (a watch saw something to act on) rather than at the end of the interval."""

    def __init__(self, *, name: str, interval: float, immediately: bool) -> None:
        self._interval = interval
        self._immediately = immediately
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def poll(self) -> object:
        raise NotImplementedError

    def start(self: Self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        if self._immediately:
            self.poll()
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.poll()
