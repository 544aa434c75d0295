"""The rules file: where it is, reading it, and the copy of the last rules that passed every check.

Which file: ``AI_ADMISSION_RULES`` (through `webhook.config.settings`), else ``rules/default.yaml`` in the
working tree, else the copy shipped in the package. A directory means its ``rules.yaml`` (a ConfigMap mounted
as a directory). The file is parsed and compiled by `webhook.core.rules`; this module only does the reading.

The last good copy outlives a worker: a worker started while the file is broken (a SIGHUP, a replaced worker)
would otherwise fail to boot, and gunicorn stops the whole server when a worker cannot boot. The gunicorn master
writes the first copy (the rules it checked at start); every good reload writes it again.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import yaml

from webhook.core.rules import Rules, RulesError, parse_rules

WORKING_TREE_RULES = Path("rules/default.yaml")


def default_rules_path(configured: str | os.PathLike[str] | None = None) -> Path:
    """``configured`` (the settings' rules), else `WORKING_TREE_RULES` when it exists, else the packaged copy."""
    if configured:
        return Path(configured)
    if WORKING_TREE_RULES.is_file():
        return WORKING_TREE_RULES
    return Path(str(resources.files("webhook") / "default_rules.yaml"))


def load_rules(path: str | os.PathLike[str] | None = None) -> Rules:
    """Read, check and compile a rules file (`default_rules_path` when ``path`` is None)."""
    rules_path = default_rules_path(path)
    if rules_path.is_dir():
        rules_path = rules_path / "rules.yaml"
    try:
        text = rules_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{rules_path}: cannot read: {exc.strerror or exc}") from exc
    return parse_rules(text, source=str(rules_path))


def keep_as_last_good(rules: Rules, target: str | None) -> None:
    """Write ``rules`` (as checked) to ``target`` for workers started later; atomic, so a reader never sees half."""
    if not target:
        return
    partial = Path(f"{target}.{os.getpid()}")
    partial.write_text(yaml.safe_dump(dict(rules.raw), sort_keys=False), encoding="utf-8")
    os.replace(partial, target)


def load_or_last_good(path: str | os.PathLike[str] | None, last_good: str | None) -> tuple[Rules, str | None]:
    """The rules in ``path``, or, when that file is broken and an earlier good copy exists at ``last_good``, that
    copy and the file's error (which the caller reports)."""
    try:
        rules = load_rules(path)
    except RulesError as exc:
        if not last_good or not os.path.isfile(last_good):
            raise
        return load_rules(last_good), str(exc)
    keep_as_last_good(rules, last_good)
    return rules, None
