"""Kubernetes resource quantities and model sizes, parsed exactly.

Quantities arrive as strings ("512Gi", "500m", "1e3") or, from hand-written YAML, as numbers. Decimal keeps
"0.1" and "100m" equal, which float would not; the API server itself uses an exact representation.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation
from typing import Any

BINARY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_PARAMS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([kKmMbBtT]?)$")
_PARAM_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity (or model size); the message is shown to the user."""


def parse_quantity(value: Any) -> Decimal:
    """Return the exact value of a Kubernetes quantity such as ``"80Gi"``, ``"500m"`` or ``8``."""
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """Cached: a cluster's pods repeat a handful of quantity strings ("1", "8Gi", "500m") endlessly."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (examples: 8, 80Gi, 500m)")
    number, exponent, suffix = match.groups()
    try:
        result = Decimal(number)
        if exponent:
            return result * (Decimal(10) ** int(exponent[1:]))
    except (InvalidOperation, ValueError) as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"{value!r} is not a quantity") from exc
    suffix = suffix or ""
    if suffix in BINARY_UNITS:
        return result * BINARY_UNITS[suffix]
    return result * _DECIMAL[suffix]


@functools.lru_cache(maxsize=1024)
def parse_model_params(value: str) -> int:
    """Parse a parameter count such as ``"70B"``, ``"7.5B"``, ``"350M"`` or ``"1.2T"`` into an integer.

    Cached, like quantities: a cluster names a few model sizes over and over."""
    match = _PARAMS.match(str(value).strip())
    if not match:
        raise QuantityError(f"{value!r} is not a parameter count (examples: 70B, 7.5B, 350M)")
    number, scale = match.groups()
    params = int(Decimal(number) * _PARAM_SCALE[scale.lower()])
    if params <= 0:
        raise QuantityError(f"{value!r} is not a positive parameter count")
    return params


@functools.lru_cache(maxsize=1024)
def format_bytes(amount: Decimal | int) -> str:
    """Human size for messages: GiB with one decimal for large values (GPU memory is sold in GiB-ish units)."""
    amount = Decimal(amount)
    gib = amount / BINARY_UNITS["Gi"]
    if gib >= 1:
        text = f"{gib:.1f}".rstrip("0").rstrip(".")
        return f"{text}Gi"
    mib = amount / BINARY_UNITS["Mi"]
    return f"{mib:.0f}Mi"


def format_quantity(amount: Decimal | int) -> str:
    """An exact Kubernetes quantity for a byte count: the largest binary suffix that divides it (32Gi, 1536Mi)."""
    value = Decimal(amount)
    if value != value.to_integral_value():
        value = value.to_integral_value(rounding="ROUND_CEILING")
    whole = int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = BINARY_UNITS[suffix]
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)
