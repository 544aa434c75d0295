"""The admission log: one JSON line per admission on standard error, written in batches without a lock.

Every pod creation produces a line, from several request threads at once. Through `logging`, each line takes
the handler's lock and threads queue behind it (seen as a quarter of a busy worker's samples); a `write()` per
line still costs a system call and a GIL hand-over per request. Here a request queues its record
(`webhook.server.batching`) and the flusher thread writes what has queued every fraction of a second: lines joined
into writes of at most PIPE_BUF bytes, each ending at a line end, which the kernel writes whole on a pipe or
an append-mode file, so lines of several workers never interleave. Everything else (warnings, errors,
tracebacks) goes through `logging` as usual.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson

from . import batching

_PIPE_BUF = 4096
_MAX_LINE = _PIPE_BUF - 96  # a longer line is cut so that its write stays atomic


def _line(record: dict[str, Any]) -> bytes:
    line = orjson.dumps(record)
    if len(line) >= _MAX_LINE:
        line = orjson.dumps({**{k: v for k, v in record.items() if k != "reasons"}, "truncated": True})[:_MAX_LINE]
    return line + b"\n"


class AdmissionLog:
    def __init__(self, fd: int = 2, *, level: str = "INFO") -> None:
        self.fd = fd
        number = logging.getLevelName(level.upper())
        self.enabled = not isinstance(number, int) or number <= logging.INFO  # unknown names: stay on
        self._queue: batching.Queue[dict[str, Any]] = batching.Queue(self._write_all)

    def write(self, record: dict[str, Any]) -> None:
        """Queue one admission record; it is written within `batching.INTERVAL` seconds."""
        if self.enabled:
            self._queue.put(record)

    def flush(self) -> None:
        self._queue.flush()

    def _write_all(self, records: list[dict[str, Any]]) -> None:
        chunk: list[bytes] = []
        size = 0
        for record in records:
            line = _line(record)
            if size + len(line) > _PIPE_BUF:
                self._emit(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        if chunk:
            self._emit(b"".join(chunk))

    def _emit(self, data: bytes) -> None:
        try:
            os.write(self.fd, data)
        except OSError:  # a closed or full stderr must never fail an admission
            pass
