"""Rules hot reload: a worker thread notices a changed rules file and swaps the rules in force.

A ConfigMap mounted as a directory is updated by the kubelet swapping a symlink (``..data``), so the file's
identity (inode, size, mtime, links followed) changes. Every ``interval`` seconds each worker compares it; a
new file is parsed and checked completely before it replaces anything, so an invalid file is rejected with a
log line and a metric while the last good rules stay in force. No request waits: the swap is one assignment.
Every good load is also kept as the last good copy (`webhook.config.rules_file`), which a worker started while
the file is broken starts with.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

from webhook.cluster.background import Poller
from webhook.config.rules_file import keep_as_last_good, load_or_last_good, load_rules
from webhook.core.rules import Rules, RulesError

from .metrics import instruments

log = logging.getLogger("ai_admission")


def load_at_start(path: str | os.PathLike[str], last_good: str | None) -> tuple[Rules, str | None]:
    """A worker's first rules: the file's, else the last good copy (counted and logged as a rejected file)."""
    rules, error = load_or_last_good(path, last_good)
    if error is not None:
        instruments().rules_reload_errors.inc()
        log.error(json.dumps({"msg": "rules rejected, starting with the last good rules", "error": error}))
    return rules, error


def _identity(path: Path) -> tuple[int, int, int] | None:
    target = path / "rules.yaml" if path.is_dir() else path
    try:
        stat = os.stat(target)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class RulesWatch(Poller):
    def __init__(self, path: str | os.PathLike[str], on_change: Callable[[Rules], None], *,
                 interval: float = 2.0, last_good: str | None = None) -> None:
        super().__init__(name="rules-watch", interval=interval, immediately=False)
        self.path = Path(path)
        self._on_change = on_change
        self._identity = _identity(self.path)
        self._last_good = last_good
        self.last_error: str | None = None

    def poll(self) -> bool:
        """Reload when the file changed; True when new rules took effect."""
        identity = _identity(self.path)
        if identity is None or identity == self._identity:
            return False
        self._identity = identity
        metrics = instruments()
        try:
            rules = load_rules(self.path)
        except RulesError as exc:
            self.last_error = str(exc)
            metrics.rules_reload_errors.inc()
            metrics.rules_reload_failing.set(1)
            log.error(json.dumps({"msg": "rules rejected, keeping the previous rules", "error": str(exc)}))
            return False
        self.last_error = None
        keep_as_last_good(rules, self._last_good)
        self._on_change(rules)
        metrics.rules_reload_failing.set(0)
        metrics.rules_generation.inc()
        metrics.rules_loaded_at.set(time.time())
        log.warning(json.dumps({"msg": "rules reloaded", "source": rules.source}))
        return True
