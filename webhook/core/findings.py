"""What the policy finds about a pod: a machine-readable code, a message for the person, a severity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["deny", "warn"]


@dataclass
class Finding:
    """One problem. ``deny`` findings reject in deny mode; ``warn`` findings are always warnings.

    Codes are stable (metrics, logs and tests key on them); messages are written for the ML engineer who ran
    ``kubectl apply`` and say what to add.
    """

    code: str
    message: str
    severity: Severity = "deny"


def deny(code: str, message: str) -> Finding:
    return Finding(code=code, message=message, severity="deny")


def warn(code: str, message: str) -> Finding:
    return Finding(code=code, message=message, severity="warn")
