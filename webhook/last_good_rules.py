"""The last rules that passed every check, kept where a worker started later finds them (see webhook.reload).

Its own module because the gunicorn master writes the first copy: the master must not import
``webhook.metrics``, whose unlabelled gauges would otherwise be created (at 0) in the master's metrics file.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from .rules import Rules

LAST_GOOD_ENV = "AI_ADMISSION_LAST_GOOD_RULES"


def keep_as_last_good(rules: Rules) -> None:
    """Write ``rules`` (as checked) where a worker started later finds them; atomic, so a reader never sees half."""
    target = os.environ.get(LAST_GOOD_ENV)
    if not target:
        return
    partial = Path(f"{target}.{os.getpid()}")
    partial.write_text(yaml.safe_dump(dict(rules.raw), sort_keys=False), encoding="utf-8")
    os.replace(partial, target)
