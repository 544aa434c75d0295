"""gunicorn's gthread worker, except that a TLS connection waits for its first request on the poller, not in a thread.

Why: gthread hands a new connection to one of its threads (4 per worker here), which completes the TLS
handshake and then blocks reading the first request. The API server's HTTP client (Go's ``net/http``) dials a
new connection whenever a call finds none idle, and keeps the ones it did not need: handshake done, no request
until a later call picks it from the idle pool. Each such connection held a thread for up to
``AI_ADMISSION_IO_TIMEOUT`` (10 s); four of them on one worker stopped it, and calls hashed to that worker
waited past the webhook's 5 s timeout and were admitted unchecked (``failurePolicy: Ignore``). It happens when
the API server reconnects: after every worker restart, rolling update or certificate rotation. Measured: with 16
such connections open, new connections waited 2-10 s for their handshake.

Here, once the handshake is done, a connection with no bytes waiting goes back to the worker's poller, exactly
like a kept-alive connection between two requests: it holds no thread, and it is closed after ``keepalive``
(120 s, longer than the API server's 90 s idle timeout) or, when the worker stops, after gunicorn's short linger.
A connection whose request is already there (the usual case: Go writes it right after the handshake) is served
at once in the same thread. Slow clients that send half a handshake or half a request still hold a thread until
``AI_ADMISSION_IO_TIMEOUT`` (webhook.server.tls): those are not what a healthy API server does.

This overrides one method of ``gunicorn.workers.gthread.ThreadWorker`` and relies on gunicorn 27's connection
states (``TConn.initialized``/``data_ready``, ``_DEFER``, keep-alive on a truthy result), hence the version
range in setup.cfg; tests/server/test_hardening.py fails if the behaviour is lost.
"""

from __future__ import annotations

import errno
import ssl
from typing import Any

from gunicorn.workers import gthread

QUIET_ERRNOS = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN)


class ThreadWorker(gthread.ThreadWorker):
    """gthread, with idle fresh TLS connections parked on the poller (see the module docstring)."""

    def handle(self, conn: Any) -> Any:
        if conn.initialized or not self.cfg.is_ssl:
            return super().handle(conn)
        if not conn.data_ready and not conn.wait_for_data(gthread.DEFAULT_WORKER_DATA_TIMEOUT):
            return gthread._DEFER  # no ClientHello yet: gunicorn parks it on the poller itself
        try:
            conn.sock.setblocking(True)
            conn.init()  # wraps the socket and completes the handshake
        except ssl.SSLError as exc:  # a client that is not speaking TLS 1.2+, or went away (webhook.server.tls: a stall)
            self.log.debug("TLS handshake failed: %s", exc)
            conn.sock.close()
            return False
        except OSError as exc:
            if exc.errno not in QUIET_ERRNOS:
                self.log.exception("Socket error during the TLS handshake.")
            conn.sock.close()
            return False
        # Has the request started to arrive: decrypted bytes buffered in TLS, or bytes in the kernel's buffer?
        # (gthread's own check, asked again: its flag meant "the ClientHello arrived".)
        conn.data_ready = False
        if conn.is_http2 or conn.sock.pending() or conn.wait_for_data(0):
            return super().handle(conn)
        return True  # handshake done, no request yet: wait on the poller like a kept-alive connection
