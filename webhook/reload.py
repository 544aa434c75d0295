"""Rules hot reload: a worker thread notices a changed rules file and swaps the rules in force.

A ConfigMap mounted as a directory is updated by the kubelet swapping a symlink (``..data``), so the file's
identity (inode, size, mtime, links followed) changes. Every ``interval`` seconds each worker compares it; a
new file is parsed and checked completely before it replaces anything, so an invalid file is rejected with a
log line and a metric while the last good rules stay in force. No request waits: the swap is one assignment.

The last good rules also outlive the worker: a worker started while the file is broken (a SIGHUP, a replaced or
recycled worker) would otherwise fail to boot, and gunicorn stops the whole server when a worker cannot boot,
so every pod would be admitted unchecked. Every good load is therefore kept as a copy (its path in
``AI_ADMISSION_LAST_GOOD_RULES``, set by the gunicorn master, which writes the rules it checked at start), and
a worker that finds the file broken starts with that copy and reports the file's error (`load_or_last_good`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

from . import metrics
from .last_good_rules import LAST_GOOD_ENV, keep_as_last_good
from .polling import Poller
from .rules import Rules, RulesError, load_rules

log = logging.getLogger("ai_admission")
INTERVAL_ENV = "AI_ADMISSION_RULES_CHECK_SECONDS"
def load_or_last_good(path: str | os.PathLike[str]) -> tuple[Rules, str | None]:
    """The rules in ``path``, or, when that file is broken and an earlier good copy exists, that copy and the
    file's error."""
    try:
        rules = load_rules(path)
    except RulesError as exc:
        last_good = os.environ.get(LAST_GOOD_ENV)
        if not last_good or not os.path.isfile(last_good):
            raise
        metrics.RULES_RELOAD_ERRORS.inc()
        log.error(json.dumps({"msg": "rules rejected, starting with the last good rules", "error": str(exc)}))
        return load_rules(last_good), str(exc)
    keep_as_last_good(rules)
    return rules, None


def _identity(path: Path) -> tuple[int, int, int] | None:
    target = path / "rules.yaml" if path.is_dir() else path
    try:
        stat = os.stat(target)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class RulesWatch(Poller):
    def __init__(self, path: str | os.PathLike[str], on_change: Callable[[Rules], None], *,
                 interval: float = 2.0) -> None:
        super().__init__(name="rules-watch", interval=interval, immediately=False)
        self.path = Path(path)
        self._on_change = on_change
        self._identity = _identity(self.path)
        self.last_error: str | None = None

    def poll(self) -> bool:
        """Reload when the file changed; True when new rules took effect."""
        identity = _identity(self.path)
        if identity is None or identity == self._identity:
            return False
        self._identity = identity
        try:
            rules = load_rules(self.path)
        except RulesError as exc:
            self.last_error = str(exc)
            metrics.RULES_RELOAD_ERRORS.inc()
            metrics.RULES_RELOAD_FAILING.set(1)
            log.error(json.dumps({"msg": "rules rejected, keeping the previous rules", "error": str(exc)}))
            return False
        self.last_error = None
        keep_as_last_good(rules)
        self._on_change(rules)
        metrics.RULES_RELOAD_FAILING.set(0)
        metrics.RULES_GENERATION.inc()
        metrics.RULES_LOADED_AT.set(time.time())
        log.warning(json.dumps({"msg": "rules reloaded", "source": rules.source}))
        return True
