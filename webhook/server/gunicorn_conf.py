"""gunicorn settings for ai-admission (``gunicorn -c python:webhook.server.gunicorn_conf``).

The settings come from `webhook.config.settings` (bind address, TLS directory, workers, threads, I/O bound,
drain time, rules file), read once here in the master; the workers read theirs again in ``create_app``, with the
two variables the master sets for them (the drain flag and the last good rules).

Why these: the API server keeps a few long-lived keep-alive connections per webhook, so gthread workers with a
keep-alive longer than its idle timeout (90 s) reuse TLS sessions instead of handshaking per pod; TLS 1.2 is
the floor (the API server speaks 1.2 and 1.3). The SSL context is cached per worker and reloaded when the
certificate files change (webhook.server.tls), instead of gunicorn's default of building one per connection.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, NoReturn

from webhook.config.rules_file import keep_as_last_good, load_rules
from webhook.config.settings import Settings, SettingsError
from webhook.core.rules import RulesError
from webhook.server import draining, listeners
from webhook.server.tls import ReloadingContext, server_context

try:
    settings = Settings.from_environ()
except SettingsError as _exc:  # before any worker starts: one line, not a crash loop
    logging.getLogger("gunicorn.error").error("ai-admission: cannot start: %s", _exc)
    sys.exit(2)

# Before anything imports prometheus_client: its multiprocess mode is chosen at import (see webhook.server.metrics).
# The directories made here are removed when the master exits (on_exit); one given in the environment is kept.
_made: list[str] = []
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ai-admission-metrics-")
    _made.append(os.environ["PROMETHEUS_MULTIPROC_DIR"])
_metrics_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"]
# The workers' /readyz fails while this file exists (see webhook.server.draining); they inherit the variable.
# Always a fresh one: a flag inherited from another server's environment must not be shared.
_drain_flag = Path(tempfile.mkdtemp(prefix="ai-admission-drain-"), "draining")
_made.append(str(_drain_flag.parent))
os.environ[draining.FLAG_ENV] = str(_drain_flag)
_tls_dir = settings.tls_directory

wsgi_app = "webhook.server.app:create_app()"
bind = [settings.bind_address]
workers = settings.workers
# gthread, except that a handshaken connection waits for its first request on the poller (see webhook.server.worker)
worker_class = "webhook.server.worker.ThreadWorker"
# One SO_REUSEPORT socket per worker, so the kernel spreads new connections over the workers; bound and kept by
# the master (see webhook.server.listeners and on_starting/pre_fork below), not by gunicorn's own reuse_port, which
# has every worker bind its own and lose the connections queued on it when it stops.
reuse_port = False
threads = settings.threads
keepalive = 120
timeout = 30
graceful_timeout = draining.GRACEFUL_SECONDS
certfile = os.path.join(_tls_dir, "tls.crt")
keyfile = os.path.join(_tls_dir, "tls.key")
limit_request_line = 4094
limit_request_fields = 100
accesslog = None
proc_name = "ai-admission"
control_socket_disable = True  # no runtime control interface needed; $HOME is read-only in the cluster
errorlog = "-"
loglevel = "info"
# No logconfig_dict: with one set, gunicorn computes access-log atoms for every request even though access
# logging is off (~6% of a request). The admission log is configured in each worker instead (post_fork).


_contexts: dict[tuple[str, str], ReloadingContext] = {}


def ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """One cached context per worker, reloaded when the certificate files change (see webhook.server.tls)."""
    key = (conf.certfile, conf.keyfile)
    cached = _contexts.get(key)
    if cached is None:
        cached = _contexts[key] = ReloadingContext(
            conf.certfile, conf.keyfile, lambda: server_context(default_ssl_context_factory, settings.io_timeout))
    return cached.get()


def post_fork(server: Any, worker: Any) -> None:
    """One JSON line per admission on stderr, from logger ``ai_admission`` (see webhook.server.app)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("ai_admission")
    logger.handlers[:] = [handler]
    logger.setLevel(settings.log_level)
    logger.propagate = False


def post_worker_init(worker: Any) -> None:
    """Move everything loaded so far (Flask, the kubernetes client, the rules) out of the garbage collector's
    way: a full collection otherwise walks those ~50k objects again and again (about 30 ms each here), stalling
    every request thread of the worker. Request garbage is still collected as usual."""
    gc.freeze()


def worker_exit(server: Any, worker: Any) -> None:
    """Write out what the worker still has queued (counts, admission log lines; see webhook.server.batching)."""
    from webhook.server import batching

    batching.flush_all()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def pre_fork(server: Any, worker: Any) -> None:
    """The worker serves one slot's listening socket (see webhook.server.listeners)."""
    listeners.assign(server, worker)


def on_starting(server: Any) -> None:
    """Check the rules before any worker forks: a bad file stops start-up with one line, not a crash loop.

    Also empties the metrics directory (values of a previous run must not be counted again), binds one listening
    socket per worker (gunicorn creates none when LISTENERS is already set), and makes SIGTERM drain first.
    """
    shutil.rmtree(_metrics_dir, ignore_errors=True)
    os.makedirs(_metrics_dir, exist_ok=True)
    _drain_flag.unlink(missing_ok=True)
    try:
        rules = load_rules(settings.rules)
    except RulesError as exc:
        _cannot_start(str(exc))
    for path in (certfile, keyfile):
        if not os.path.isfile(path):
            _cannot_start(f"TLS file {path} not found")
    server.log.info("ai-admission: rules %s loaded", rules.source)
    _made.append(tempfile.mkdtemp(prefix="ai-admission-rules-"))
    last_good = os.path.join(_made[-1], "last-good.yaml")
    os.environ["AI_ADMISSION_LAST_GOOD_RULES"] = last_good  # the workers' settings.last_good_rules
    keep_as_last_good(rules, last_good)  # what a worker starts with should the file be broken by then
    server.LISTENERS = listeners.bind_slots(server.cfg, server.log, server.cfg.workers)
    draining.drain_on_term(server, _drain_flag, settings.drain_seconds)


def on_exit(server: Any) -> None:
    """The master is leaving: remove the temporary directories it made (metrics, drain flag, last good rules), so
    that restarts (a test suite, a developer's `make serve`) do not pile them up in /tmp."""
    for directory in _made:
        shutil.rmtree(directory, ignore_errors=True)


def _cannot_start(problem: str) -> NoReturn:
    """One line, then exit 2 before any worker forks (not a crash loop); gunicorn calls no on_exit then."""
    logging.getLogger("gunicorn.error").error("ai-admission: cannot start: %s", problem)
    on_exit(None)
    sys.exit(2)
