"""One writer among the gunicorn workers of one server: the first worker to take an exclusive lock on a file in
the server's own directory (fresh per server, see gunicorn_conf) holds it for as long as it lives; when it dies the
kernel releases the lock and another worker takes it at its next try. PolicyReports (`webhook.cluster.reports`) and
the nodes' facts (`webhook.cluster.cluster_facts`) each have their own file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
from typing import TextIO

log = logging.getLogger("ai_admission")


class WorkerLock:
    """`held`: whether this worker is the writer (taking the lock if it is free)."""

    def __init__(self, name: str, what: str, directory: str | None = None) -> None:
        self._path = os.path.join(directory or tempfile.gettempdir(), name)
        self._what = what
        self._handle: TextIO | None = None

    def held(self) -> bool:
        if self._handle is not None:
            return True
        handle = open(self._path, "a")  # noqa: SIM115 - held open for the worker's life: that is the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._handle = handle
        log.warning(json.dumps({"msg": f"this worker writes {self._what}", "pid": os.getpid()}))
        return True
