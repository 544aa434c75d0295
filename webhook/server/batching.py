"""Per-request bookkeeping off the request path: queue it now, write it in batches from one thread.

Every admission is counted (Prometheus) and logged (one JSON line). Done inline, that cost each request four
locked writes into Prometheus' shared files, each with a ``getpid()`` system call, and one ``write()`` to
stderr; every system call hands the GIL to another of the worker's threads, which then have to win it back.
Measured under load, counting and logging inline cost about a tenth of the webhook's CPU per request.

Here a request appends one record to a `collections.deque` (atomic, no lock) and returns. A daemon thread per
process drains the queues every ``INTERVAL`` seconds: counts are summed and added to Prometheus once per
series, log lines are joined into a few large writes. So a log line or a count shows up within a fraction of a
second, and what is queued is flushed when the worker exits (gunicorn's ``worker_exit`` hook) and whenever the
worker serves ``/metrics``. A worker killed with SIGKILL loses at most the last interval.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import weakref
from typing import Any, Callable, Generic, TypeVar

INTERVAL = 0.2
MAX_QUEUED = 100_000  # per queue; reached only if the flusher were stuck, and then the oldest records go

T = TypeVar("T")
log = logging.getLogger("ai_admission")


class Queue(Generic[T]):
    """Records waiting for ``consume``, which the flusher thread calls with everything queued so far."""

    def __init__(self, consume: Callable[[list[T]], None]) -> None:
        self._items: collections.deque[T] = collections.deque(maxlen=MAX_QUEUED)
        self._consume = consume
        self._flush_lock = threading.Lock()
        _queues.add(self)

    def put(self, item: T) -> None:
        self._items.append(item)
        if _flusher is None:
            _start()

    def flush(self) -> None:
        """Hand everything queued to ``consume`` (the flusher does this on its own every ``INTERVAL``)."""
        with self._flush_lock:  # the flusher thread and a /metrics request may flush at the same time
            items = []
            pop = self._items.popleft
            try:
                while True:
                    items.append(pop())
            except IndexError:
                pass
            if items:
                self._consume(items)


_queues: weakref.WeakSet[Queue[Any]] = weakref.WeakSet()  # an app dropped (tests) takes its queue
_flusher: threading.Thread | None = None
_start_lock = threading.Lock()
_stop = threading.Event()


def flush_all() -> None:
    for queue in list(_queues):
        try:
            queue.flush()
        except Exception:  # never let bookkeeping take the worker down; say so and keep going
            log.exception("flushing queued metrics or log lines failed")


def _run() -> None:
    while not _stop.wait(INTERVAL):
        flush_all()


def _start() -> None:
    global _flusher
    with _start_lock:
        if _flusher is None:
            _flusher = threading.Thread(target=_run, name="ai-admission-flusher", daemon=True)
            _flusher.start()


def _forget_after_fork() -> None:
    """Threads do not survive fork: a child (a gunicorn worker) starts its own flusher on first use."""
    global _flusher, _start_lock, _stop
    _flusher = None
    _start_lock = threading.Lock()
    _stop = threading.Event()
    for queue in _queues:
        queue._flush_lock = threading.Lock()
        queue._items.clear()  # the parent's records are the parent's to flush


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(flush_all)
