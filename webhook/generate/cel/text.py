"""CEL text: literals, regular expressions, optionals, JSON Patch operations, and the one rewrite the admission
environment needs (`without_bind`).

Everything the library writes goes through these, so a literal is quoted one way, a rule's regular expression is
checked against RE2 one way, and an optional path is read one way.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator


class Untranslatable(ValueError):
    """A part of the rules that CEL cannot express faithfully."""


# Python regular-expression syntax RE2 does not have (https://github.com/google/re2/wiki/Syntax).
_NOT_IN_RE2 = re.compile(r"\(\?[=!<>(]|\(\?P=|\\[1-9]|\\Z|\{,")


def cel_string(text: str) -> str:
    """``text`` as a CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(texts: Iterable[str]) -> str:
    """A CEL list of string literals, sorted (for membership: the order does not matter)."""
    return "[" + ", ".join(cel_string(t) for t in sorted(texts)) + "]"


def listed(texts: Iterable[str]) -> str:
    """A CEL list of string literals in the rules' own order (the first match wins)."""
    return "[" + ", ".join(cel_string(t) for t in texts) + "]"


def cel_map(entries: dict[str, str]) -> str:
    """A CEL map of string keys to CEL expressions (each ``dyn``: the values of a literal must share a type)."""
    return "{" + ", ".join(f"{cel_string(key)}: dyn({value})" for key, value in entries.items()) + "}"


def cel_regex(pattern: re.Pattern[str]) -> str:
    """A pattern of the rules as the argument of CEL's ``matches``, or `Untranslatable`."""
    if _NOT_IN_RE2.search(pattern.pattern):
        raise Untranslatable(f"regular expression {pattern.pattern!r} uses syntax RE2 (CEL) does not have")
    return cel_string(pattern.pattern)


def caseless_regex(pattern: re.Pattern[str]) -> str:
    """A pattern the rules match without case, for CEL's ``matches`` (RE2's ``(?i)``), or `Untranslatable`."""
    cel_regex(pattern)
    return cel_string("(?i)" + pattern.pattern)


def anchored(pattern: str) -> str:
    """Python's ``re.match`` anchors at the start; CEL's ``matches`` finds a match anywhere."""
    return pattern if pattern.startswith("^") else f"^(?:{pattern})"


def opt(root: str, dotted: str) -> str:
    """``root.?a.?b`` (an optional); ``dotted`` empty: ``root`` itself as an optional."""
    return root + "".join(f".?{part}" for part in dotted.split(".")) if dotted else f"optional.of({root})"


def get(root: str, dotted: str, default: str) -> str:
    """``root.a.b``, or ``default`` where a part is absent."""
    return f"{opt(root, dotted)}.orValue({default})" if dotted else root


def all_of(clauses: Iterable[str]) -> str:
    """The conjunction of ``clauses``, each parenthesised ("true" for none)."""
    found = [f"({c})" for c in clauses]
    return " && ".join(found) if found else "true"


def any_of(clauses: Iterable[str]) -> str:
    """The disjunction of ``clauses``, each parenthesised ("false" for none)."""
    found = [f"({c})" for c in clauses]
    return " || ".join(found) if found else "false"


def plain_map(**fields: str) -> str:
    """A CEL map of JSON values (each ``dyn``: a map literal's values must otherwise be of one type). A JSON Patch
    value is always plain: one typed list in a JSON Patch value made a v1.36 API server panic on every pod create."""
    return cel_map(dict(fields))


def add(path: str, value: str) -> str:
    """A JSON Patch ``add`` of ``value`` at ``path`` (both CEL expressions)."""
    return f"JSONPatch{{op: 'add', path: {path}, value: {value}}}"


def remove(path: str) -> str:
    """A JSON Patch ``remove`` at ``path`` (a CEL expression)."""
    return f"JSONPatch{{op: 'remove', path: {path}}}"


def indexed(items: str, index: str, body: str) -> str:
    """``body`` for each index ``index`` of the list ``items``: the lists library's ``lists.range``, since the API
    server's two-variable comprehensions (``transformList``) have no other evaluator to be checked against."""
    return f"lists.range(size({items})).map({index}, {body})"


def indexed_where(items: str, index: str, test: str, body: str) -> str:
    """``body`` for each index of ``items`` where ``test`` holds."""
    return f"lists.range(size({items})).filter({index}, {test}).map({index}, {body})"


def outside_quotes(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """Each character of ``text`` from ``start`` that is not inside a quoted string, with its index and the depth of
    brackets it stands in (an opening bracket at the depth before it, a closing one at the depth it closes): what a
    rewriter of CEL text needs to split at commas and find a closing bracket without a parser."""
    depth, quote, i = 0, "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        else:
            if ch in ")]}":
                depth -= 1
            yield i, ch, depth
            if ch in "([{":
                depth += 1
        i += 1


def split_at_commas(text: str, start: int = 0) -> tuple[list[str], int]:
    """The comma-separated parts inside the bracket at ``start`` (its top-level commas only), and the index after
    its closing bracket."""
    parts: list[str] = []
    begin = start + 1
    for i, ch, depth in outside_quotes(text, start):
        if depth == 0 and ch in ")]}":
            parts.append(text[begin:i])
            return parts, i + 1
        if depth == 1 and ch == ",":
            parts.append(text[begin:i])
            begin = i + 1
    raise ValueError("unbalanced CEL")


def without_bind(expression: str) -> str:
    """``cel.bind(x, init, body)`` as ``[dyn(init)].map(x, body)[0]``: the admission environment has no
    ``cel.bind`` (the library writes with it for readability); a one-element map binds the same name once, as dyn,
    since the values come from objects of any shape."""
    at = expression.find("cel.bind(")
    while at >= 0:
        args, end = split_at_commas(expression, at + len("cel.bind"))
        name, init, body = (a.strip() for a in args)
        replaced = f"[dyn({without_bind(init)})].map({name}, {without_bind(body)})[0]"
        expression = expression[:at] + replaced + expression[end:]
        at = expression.find("cel.bind(", at + len(replaced))
    return expression


def unbound(variables: list[dict[str, str]]) -> list[dict[str, str]]:
    """Policy variables as the admission environment takes them (`without_bind`)."""
    return [{**v, "expression": without_bind(v["expression"])} for v in variables]
