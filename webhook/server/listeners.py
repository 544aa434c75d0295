"""Listening sockets owned by the gunicorn master, one ``SO_REUSEPORT`` socket per worker slot.

Why one socket per worker: with a single shared socket, whichever gthread worker wins ``accept()`` takes
connection after connection, and the API server's few long-lived keep-alive connections can all land on one
worker while the other cores idle. With ``SO_REUSEPORT`` the kernel spreads new connections over the sockets of
the group by a hash of their addresses.

Why the master owns them: a connection the kernel has queued on a listening socket (handshake done, not yet
accepted) is reset when that socket closes. gunicorn's own ``reuse_port`` has each worker bind its socket after
fork, so a worker that stops (graceful replacement on SIGHUP, a SIGTERMed or recycled worker) stops accepting at
once yet keeps its socket in the group until it has drained, and every connection hashed to it meanwhile was
reset or timed out: through a real API server, about 1.5 pods per SIGHUP under load came back unmutated
(failurePolicy Ignore). Here the master binds the sockets before the first fork and never closes them while it
runs; each worker serves one slot's socket, and a new worker takes the slot of the one it replaces. A connection
queued on a slot whose worker is stopping waits for the next worker of that slot instead of being reset.

The number of slots is the number of workers at start (``WEB_CONCURRENCY``); TTIN adds workers that share the
least served slot, and TTOU is not supported (a slot left without a worker would hold its connections).
"""

from __future__ import annotations

import socket
from typing import Any

from gunicorn import sock as gunicorn_sock


def _bound(address: tuple[str, int], backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    raw = socket.socket(family, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    raw.bind(address)
    raw.listen(backlog)
    return raw


def bind_slots(cfg: Any, log: Any, slots: int) -> list[Any]:
    """``slots`` listening sockets on the configured address (gunicorn socket objects, inheritable)."""
    (address,) = cfg.address  # one TCP address: 127.0.0.1:$PORT or AI_ADMISSION_BIND
    if not isinstance(address, tuple):
        raise ValueError(f"ai-admission listens on one host:port, not {address!r}")
    kind = gunicorn_sock._sock_type(address)
    return [kind(address, cfg, log, fd=_bound(address, cfg.backlog).detach()) for _ in range(slots)]


def choose_slot(workers: Any, slots: int) -> int:
    """The slot a new worker serves: the one with the fewest live workers, and of those the one whose newest
    worker is oldest (on SIGHUP every slot has one old worker, about to be stopped: each new worker takes the
    slot of one of them)."""
    served: dict[int, list[int]] = {slot: [] for slot in range(slots)}
    for worker in workers:
        slot = getattr(worker, "ai_admission_slot", None)
        if slot in served:
            served[slot].append(worker.age)
    return min(served, key=lambda slot: (len(served[slot]), max(served[slot], default=-1)))


def assign(server: Any, worker: Any) -> None:
    """Before fork: give ``worker`` its slot's socket (the other slots' stay open in the master only)."""
    slot = choose_slot(server.WORKERS.values(), len(server.LISTENERS))
    worker.ai_admission_slot = slot
    worker.sockets = [server.LISTENERS[slot]]
