"""Read what a DRA device selector states about a device, without evaluating CEL.

A selector is a CEL expression over ``device``; the API server has compiled it, but it can be anything. Only one
shape is read: a conjunction (``&&``) whose terms are comparisons of one attribute or capacity with a literal.
Every term of a conjunction must hold for a device to match, so each term ai-admission reads is a fact about
any device the selector lets through, whatever the other terms say; terms it cannot read are skipped. An
expression with ``||`` or ``?`` at its top level (or one it cannot even split) states nothing: a term there
need not hold. Nothing here raises on any input.

Read terms (either quote style, any whitespace, ``.name`` or ``["name"]``, optional parentheses)::

    device.attributes["<domain>"].<name> == "<string>"        (or the literal first)
    device.capacity["<domain>"].<name>.compareTo(quantity("<q>")) >= 0     (also > 0, == 0)
    device.capacity["<domain>"].<name>.isGreaterThan(quantity("<q>"))
    device.capacity["<domain>"].<name> == quantity("<q>")
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

ATTRIBUTE = "attribute"
CAPACITY = "capacity"


@dataclass(frozen=True)
class Term:
    """One comparison a selector makes: ``kind`` attribute or capacity, ``op`` ``==``, ``>=`` or ``>``."""

    kind: str
    domain: str
    name: str
    op: str
    value: str   # the string literal, or the quantity text


_Q = r"""(?P<{0}>["'])(?P<{1}>[^"'\\\n]*)(?P={0})"""  # a CEL string without escapes
_WS = r"\s*"


def _access(kind: str) -> str:
    return (rf"device{_WS}\.{_WS}{kind}{_WS}\[{_WS}{_Q.format('dq', 'domain')}{_WS}\]{_WS}"
            rf"(?:\.{_WS}(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\[{_WS}{_Q.format('nq', 'qname')}{_WS}\])")


_QUANTITY = rf"quantity{_WS}\({_WS}{_Q.format('qq', 'quantity')}{_WS}\)"
_STRING = _Q.format("sq", "string")

_FORMS: tuple[tuple[re.Pattern[str], str, str | None], ...] = tuple(
    (re.compile(pattern, re.DOTALL), kind, op) for pattern, kind, op in (
        (rf"{_access('attributes')}{_WS}=={_WS}{_STRING}", ATTRIBUTE, "=="),
        (rf"{_STRING}{_WS}=={_WS}{_access('attributes')}", ATTRIBUTE, "=="),
        (rf"{_access('capacity')}{_WS}\.{_WS}compareTo{_WS}\({_WS}{_QUANTITY}{_WS}\){_WS}(?P<op>>=|>|==){_WS}0",
         CAPACITY, None),
        (rf"{_access('capacity')}{_WS}\.{_WS}isGreaterThan{_WS}\({_WS}{_QUANTITY}{_WS}\)", CAPACITY, ">"),
        (rf"{_access('capacity')}{_WS}=={_WS}{_QUANTITY}", CAPACITY, "=="),
    ))

_OPEN = "([{"
_CLOSE = ")]}"


def _split(text: str) -> list[str] | None:
    """``text`` split at its top-level ``&&``; None when it has a top-level ``||`` or ``?``, or is unbalanced."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char in "\"'":
            quote = char * 3 if text.startswith(char * 3, i) else char
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if text[i] == "\\" else 1
            if i >= n:
                return None
            i += len(quote)
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            pair = text[i:i + 2]
            if pair == "&&":
                parts.append(text[start:i])
                i += 2
                start = i
                continue
            if pair == "||" or char == "?":
                return None
        i += 1
    if depth != 0:
        return None
    parts.append(text[start:])
    return parts


def _unwrap(term: str) -> str:
    """``term`` without the parentheses that enclose all of it (``(a) && (b)`` keeps its own); parentheses
    around an alternative (``(a || b)``) stay too: that term states nothing either way."""
    while term.startswith("(") and term.endswith(")") and _split(term[1:-1]) is not None:
        term = term[1:-1].strip()
    return term


def _term(text: str) -> Term | None:
    for pattern, kind, op in _FORMS:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        groups = match.groupdict()
        name = groups.get("name") or groups.get("qname") or ""
        value = groups.get("string") if kind == ATTRIBUTE else groups.get("quantity")
        return Term(kind=kind, domain=groups["domain"], name=name, op=op or groups["op"], value=value or "")
    return None


def _terms(text: str, depth: int) -> list[Term]:
    """The read terms of the conjunction ``text``; a parenthesised part is read as a conjunction of its own."""
    parts = _split(text)
    if parts is None or depth > 16:
        return []
    found: list[Term] = []
    for part in parts:
        written = part.strip()
        inner = _unwrap(written)
        term = _term(inner)
        if term is not None:
            found.append(term)
        elif inner != written:
            found.extend(_terms(inner, depth + 1))
    return found


@functools.lru_cache(maxsize=1024)
def read_selector(expression: str) -> tuple[Term, ...]:
    """The terms of ``expression`` that every matching device satisfies (see the module doc); () for none.

    Remembered: a cluster's claims repeat a few selectors."""
    if not isinstance(expression, str) or len(expression) > 10 * 1024:  # the API server's own limit is 10 Ki
        return ()
    return tuple(_terms(expression, 0))
