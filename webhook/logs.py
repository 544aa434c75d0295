"""The admission log: one JSON line per admission on standard error, written without a lock.

Every pod creation produces a line, from several request threads at once. Through `logging`, each line takes
the handler's lock and threads queue behind it (seen as a quarter of a busy worker's samples); here a line is
one `os.write` of fewer than PIPE_BUF bytes, which the kernel writes whole on a pipe or an append-mode file,
so lines never interleave and no thread waits for another. Everything else (warnings, errors, tracebacks)
goes through `logging` as usual.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson

LEVEL_ENV = "AI_ADMISSION_LOG_LEVEL"
_MAX_LINE = 4000  # below PIPE_BUF (4096): a longer line is cut so the write stays atomic


class AdmissionLog:
    def __init__(self, fd: int = 2, *, level: str | None = None) -> None:
        self.fd = fd
        number = logging.getLevelName((level or os.environ.get(LEVEL_ENV, "INFO")).upper())
        self.enabled = not isinstance(number, int) or number <= logging.INFO  # unknown names: stay on

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = orjson.dumps(record)
        if len(line) > _MAX_LINE:
            line = orjson.dumps({**{k: v for k, v in record.items() if k != "reasons"}, "truncated": True})[:_MAX_LINE]
        try:
            os.write(self.fd, line + b"\n")
        except OSError:  # a closed or full stderr must never fail an admission
            pass
