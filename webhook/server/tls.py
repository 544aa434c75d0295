"""The server's TLS context: built once per worker, rebuilt when the certificate files change.

gunicorn's gthread worker asks for an SSL context for every accepted connection, and its default builds a new
one each time, reading and parsing the certificate chain from disk per connection. This cache serves the same
context until the files change (a Secret update swaps the mounted files), checking their identity at most every
``CHECK_SECONDS``; open connections keep the context they started with, new ones get the new certificate, so a
rotation drops no request and needs no restart. A half-written pair (new certificate, old key) fails to load
and the previous context stays in use until the next check.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from typing import Any, Callable

CHECK_SECONDS = 2.0
log = logging.getLogger("ai_admission")


class BoundedSSLSocket(ssl.SSLSocket):
    """A server TLS socket on which "blocking" means "blocking for at most ``io_timeout`` seconds".

    gunicorn's gthread worker commits a thread to a connection as soon as any bytes arrive and then reads with
    a blocking socket and no timeout (it also resets the socket to blocking each time a keep-alive connection
    comes back from its poller). A client that sends half a request could hold the thread forever; eight of
    them stopped every worker here. With this class every blocking handshake, read and write gives up after
    ``io_timeout``, the connection is closed and the thread is free again. Non-blocking use (the poller's,
    for idle keep-alive connections) is unchanged.

    A stall is closed quietly, not logged as an error with a traceback (gunicorn 27 logs any other timeout so):
    a read that times out under the bound reads as the end of the stream (the parser closes the connection; a
    half-sent request is never answered) and a handshake that times out as a TLS EOF. A timeout the caller set
    itself (gunicorn's bounded drain of an unread body) still raises, because the caller handles it. The
    connections a healthy API server keeps idle (handshake done, no request yet) never get here: the worker
    parks them on its poller (webhook.server.worker).
    """

    io_timeout: float = 10.0

    def settimeout(self, value: float | None) -> None:
        super().settimeout(self.io_timeout if value is None else value)

    def setblocking(self, flag: bool) -> None:
        self.settimeout(None if flag else 0.0)

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002 - ssl.SSLSocket's signature
        try:
            return super().read(len, buffer)
        except TimeoutError:
            if self.gettimeout() != self.io_timeout:  # a timeout of the caller's own
                raise
            log.debug('{"msg":"connection closed: no bytes for %s s"}', self.io_timeout)
            return b"" if buffer is None else 0

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except TimeoutError:
            raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF, f"TLS handshake not completed within {self.io_timeout} s") from None


def _identity(*paths: str) -> tuple[tuple[int, int, int], ...]:
    """What changes when a file is replaced: inode, size and modification time (links are followed)."""
    result = []
    for path in paths:
        stat = os.stat(path)
        result.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(result)


class ReloadingContext:
    def __init__(self, certfile: str, keyfile: str, factory: Callable[[], ssl.SSLContext],
                 check_seconds: float = CHECK_SECONDS) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self._factory = factory
        self._check_seconds = check_seconds
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._identity: tuple[tuple[int, int, int], ...] | None = None
        self._checked = 0.0
        self.loads = 0

    def get(self) -> ssl.SSLContext:
        now = time.monotonic()
        if self._context is not None and now - self._checked < self._check_seconds:
            return self._context
        with self._lock:
            if self._context is not None and now - self._checked < self._check_seconds:
                return self._context
            self._checked = now
            try:
                identity = _identity(self.certfile, self.keyfile)
                if identity != self._identity or self._context is None:
                    self._context = self._factory()
                    self._identity = identity
                    self.loads += 1
                    record_expiry(self.certfile)
                    if self.loads > 1:
                        log.info('{"msg":"tls certificate reloaded","certfile":"%s"}', self.certfile)
            except (OSError, ssl.SSLError, ValueError) as exc:
                if self._context is None:
                    raise
                log.warning('{"msg":"tls reload failed, keeping the previous certificate","error":"%s"}', exc)
            return self._context


def record_expiry(certfile: str) -> None:
    from cryptography import x509

    from .metrics import instruments  # in the worker, after the multiprocess directory is set

    try:
        with open(certfile, "rb") as pem:
            cert = x509.load_pem_x509_certificate(pem.read())
    except (OSError, ValueError) as exc:
        # the TLS context loaded the file, so this is a race with a rotation; the next reload records it
        log.warning(json.dumps({"msg": "certificate expiry not recorded", "file": certfile,
                                "error": f"{type(exc).__name__}: {exc}"}))
        return
    instruments().cert_expiry.set(cert.not_valid_after_utc.timestamp())


def server_context(factory: Callable[[], ssl.SSLContext], io_timeout: float = 10.0) -> ssl.SSLContext:
    """Harden gunicorn's default context: TLS 1.2 or newer only, and blocking I/O bounded by ``io_timeout``
    seconds per connection (the settings' ``AI_ADMISSION_IO_TIMEOUT``)."""
    context = factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    bounded = type("BoundedSSLSocket", (BoundedSSLSocket,),
                   {"io_timeout": io_timeout})
    context.sslsocket_class = bounded
    return context
