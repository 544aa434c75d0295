"""The API server's CEL, in-process: cel-cpp (the CEL project's C++ implementation, through its Python binding) with
the Kubernetes libraries an admission policy may call, so that the generated policies run offline in every
``make test`` (`tests/support/policy_chain.py`).

What is emulated here, each as the API server's v1.36 environment defines it
(``k8s.io/apiserver/pkg/cel/environment/base.go``):

- the Kubernetes quantity library (``quantity``, ``isQuantity`` and the methods a Quantity has), exact, on
  `webhook.core.quantity.parse_quantity` (a quantity is a one-key map here: its kind is never asked for);
- the Kubernetes list library (``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``, ``isSorted``) and cel-go's
  lists extension, version 3 (``lists.range``, ``distinct``, ``flatten``, ``reverse``, ``slice``, ``sort``; not
  ``first`` and ``last``, whose optionals a function of the binding cannot return);
- cel-go's strings extension, version 2 (``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``,
  ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``), written here because the binding's
  own strings extension declares ``indexOf`` and ``lastIndexOf`` for strings only, and the list library needs them
  too;
- ``jsonpatch.escapeKey``, which a mutation's expressions may call;
- a ``JSONPatch{op: ..., path: ..., value: ...}`` literal, which a MutatingAdmissionPolicy's JSON Patch
  expression builds: rewritten, before compiling, into the map of the same fields (`as_plain`).

What is not: two-variable comprehensions (``transformList``, ``all(i, v, ...)``), typed object literals
(``Object.spec...{}``) and ``cel.bind`` (the API server has none either). The generator writes none of them in a
policy (`webhook.generate.cel`), and a policy that used one would fail here with the binding's own words.
Optional types come from the binding's extension; RE2 is the API server's regular expressions too.

An evaluation error is raised as `CelError` with the binding's message: the caller decides what the API server's
``failurePolicy`` does with it.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from typing import Any, Callable, Iterable

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

from webhook.core.quantity import QuantityError, parse_quantity
from webhook.generate.cel.text import split_at_commas

QUANTITY = "__quantity__"  # the one key of a quantity's map


class CelError(RuntimeError):
    """An expression the binding refused to compile, or whose evaluation ended in an error."""


# -- the Kubernetes quantity library --------------------------------------------------------------------------

def _quantity(text: str) -> dict[str, str]:
    try:
        parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(f"quantities must match the regular expression: {text!r}") from exc
    return {QUANTITY: text.strip()}


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _amount(q: Any) -> Decimal:
    if isinstance(q, dict) and QUANTITY in q:
        return parse_quantity(q[QUANTITY])
    if isinstance(q, int) and not isinstance(q, bool):
        return Decimal(q)
    raise ValueError(f"no such overload: {q!r} is not a quantity")


def _as_integer(q: Any) -> int:
    amount = _amount(q)
    if amount != amount.to_integral_value() or not -(2**63) <= amount < 2**63:
        raise ValueError("cannot convert value to integer")
    return int(amount)


def _compare(a: Any, b: Any) -> int:
    x, y = _amount(a), _amount(b)
    return (x > y) - (x < y)


def _sum_quantities(a: Any, b: Any, sign: int) -> dict[str, str]:
    return {QUANTITY: str(_amount(a) + sign * _amount(b))}


# -- the list libraries --------------------------------------------------------------------------------------

def _index_of(items: list[Any], value: Any) -> int:
    return next((i for i, item in enumerate(items) if item == value), -1)


def _last_index_of(items: list[Any], value: Any) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if items[i] == value), -1)


def _numbers(items: list[Any]) -> list[Any]:
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ValueError(f"no such overload: {item!r} in a list of numbers")
    return items


def _sum(items: list[Any]) -> Any:
    return sum(_numbers(items)) if items else 0


def _least(items: list[Any]) -> Any:
    if not items:
        raise ValueError("min called on an empty list")
    return min(_numbers(items))


def _most(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max called on an empty list")
    return max(_numbers(items))


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    found: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            found += _flatten(item, depth - 1)
        else:
            found.append(item)
    return found


def _distinct(items: list[Any]) -> list[Any]:
    found: list[Any] = []
    for item in items:
        if item not in found:
            found.append(item)
    return found


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < start or end > len(items):
        raise ValueError(f"cannot slice({start}, {end}) a list of {len(items)}")
    return items[start:end]


# -- cel-go's strings extension, version 2 -------------------------------------------------------------------

def _string_index_of(text: str, sub: str, start: int = 0) -> int:
    if start < 0 or start > len(text):
        raise ValueError(f"index out of range: {start}")
    return text.find(sub, start)


def _string_last_index_of(text: str, sub: str, end: int | None = None) -> int:
    if end is None:
        return text.rfind(sub)
    if end < 0 or end >= len(text):
        raise ValueError(f"index out of range: {end}")
    return text.rfind(sub, 0, end + len(sub))


def _substring(text: str, start: int, end: int | None = None) -> str:
    end = len(text) if end is None else end
    if start < 0 or start > len(text) or end < start or end > len(text):
        raise ValueError(f"index out of range: {start}, {end}")
    return text[start:end]


def _char_at(text: str, index: int) -> str:
    if index < 0 or index > len(text):
        raise ValueError(f"index out of range: {index}")
    return text[index:index + 1]


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    return text.replace(old, new, count)


def _split(text: str, separator: str, count: int = -1) -> list[str]:
    if count == 0:
        return []
    if separator == "":
        parts = list(text)
        return parts if count < 0 else parts[:count - 1] + (["".join(parts[count - 1:])] if len(parts) >= count else [])
    return text.split(separator, count - 1) if count > 0 else text.split(separator)


def _join(items: list[Any], separator: str = "") -> str:
    if not all(isinstance(item, str) for item in items):
        raise ValueError("join: every element must be a string")
    return separator.join(items)


def _lower_ascii(text: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def _upper_ascii(text: str) -> str:
    return "".join(c.upper() if "a" <= c <= "z" else c for c in text)


# -- the environment -----------------------------------------------------------------------------------------

T = cel.Type
KINDS = (T.STRING, T.INT, T.UINT, T.DOUBLE, T.BOOL, T.MAP, T.LIST, T.NULL)
LIST, MAP, STRING, INT = T.List(T.DYN), T.Map(T.DYN, T.DYN), T.STRING, T.INT
QUANTITY_TYPE = T.Map(T.STRING, T.STRING)


def _overload(name: str, result: Any, params: list[Any], impl: Callable[..., Any], member: bool) -> Any:
    return cel.Overload(name, result, params, is_member=member, impl=impl)


def _each_kind(function: str, result: Any, first: list[Any], impl: Callable[..., Any], member: bool = True,
               rest: Iterable[Any] = ()) -> list[Any]:
    """One overload per kind of the last parameter (the binding matches a ``dyn`` parameter to nothing)."""
    return [_overload(f"{function}_{'_'.join(p.name() for p in first)}_{kind.name()}", result,
                      [*first, kind, *rest], impl, member) for kind in KINDS]


def _declarations() -> list[Any]:
    q = QUANTITY_TYPE
    functions: dict[str, list[Any]] = {
        "quantity": [_overload("quantity_string", q, [STRING], _quantity, False)],
        "isQuantity": [_overload("is_quantity_string", T.BOOL, [STRING], _is_quantity, False)],
        "isInteger": [_overload("quantity_is_integer", T.BOOL, [q],
                                lambda a: _amount(a) == _amount(a).to_integral_value(), True)],
        "asInteger": [_overload("quantity_as_integer", INT, [q], _as_integer, True)],
        "asApproximateFloat": [_overload("quantity_as_float", T.DOUBLE, [q], lambda a: float(_amount(a)), True)],
        "sign": [_overload("quantity_sign", INT, [q], lambda a: (_amount(a) > 0) - (_amount(a) < 0), True)],
        "isGreaterThan": [_overload("quantity_greater", T.BOOL, [q, q], lambda a, b: _compare(a, b) > 0, True)],
        "isLessThan": [_overload("quantity_less", T.BOOL, [q, q], lambda a, b: _compare(a, b) < 0, True)],
        "compareTo": [_overload("quantity_compare", INT, [q, q], _compare, True)],
        "add": [_overload("quantity_add", q, [q, q], lambda a, b: _sum_quantities(a, b, 1), True),
                _overload("quantity_add_int", q, [q, INT], lambda a, b: _sum_quantities(a, b, 1), True)],
        "sub": [_overload("quantity_sub", q, [q, q], lambda a, b: _sum_quantities(a, b, -1), True),
                _overload("quantity_sub_int", q, [q, INT], lambda a, b: _sum_quantities(a, b, -1), True)],
        "sum": [_overload("list_sum", T.DYN, [LIST], _sum, True)],
        "min": [_overload("list_min", T.DYN, [LIST], _least, True)],
        "max": [_overload("list_max", T.DYN, [LIST], _most, True)],
        "isSorted": [_overload("list_is_sorted", T.BOOL, [LIST], lambda items: items == sorted(items), True)],
        "distinct": [_overload("list_distinct", LIST, [LIST], _distinct, True)],
        "flatten": [_overload("list_flatten", LIST, [LIST], _flatten, True),
                    _overload("list_flatten_depth", LIST, [LIST, INT], _flatten, True)],
        "reverse": [_overload("list_reverse", LIST, [LIST], lambda items: list(reversed(items)), True)],
        "sort": [_overload("list_sort", LIST, [LIST], sorted, True)],
        "slice": [_overload("list_slice", LIST, [LIST, INT, INT], _slice, True)],
        "jsonpatch.escapeKey": [_overload("jsonpatch_escape_key", STRING, [STRING],
                                          lambda k: k.replace("~", "~0").replace("/", "~1"), False)],
        "lists.range": [_overload("lists_range", T.List(INT), [INT], lambda n: list(range(max(n, 0))), False)],
        "indexOf": [*_each_kind("list_index_of", INT, [LIST], _index_of),
                    _overload("string_index_of", INT, [STRING, STRING], _string_index_of, True),
                    _overload("string_index_of_from", INT, [STRING, STRING, INT], _string_index_of, True)],
        "lastIndexOf": [*_each_kind("list_last_index_of", INT, [LIST], _last_index_of),
                        _overload("string_last_index_of", INT, [STRING, STRING], _string_last_index_of, True),
                        _overload("string_last_index_of_to", INT, [STRING, STRING, INT], _string_last_index_of,
                                  True)],
        "charAt": [_overload("string_char_at", STRING, [STRING, INT], _char_at, True)],
        "lowerAscii": [_overload("string_lower_ascii", STRING, [STRING], _lower_ascii, True)],
        "upperAscii": [_overload("string_upper_ascii", STRING, [STRING], _upper_ascii, True)],
        "replace": [_overload("string_replace", STRING, [STRING, STRING, STRING], _replace, True),
                    _overload("string_replace_n", STRING, [STRING, STRING, STRING, INT], _replace, True)],
        "split": [_overload("string_split", T.List(STRING), [STRING, STRING], _split, True),
                  _overload("string_split_n", T.List(STRING), [STRING, STRING, INT], _split, True)],
        "substring": [_overload("string_substring", STRING, [STRING, INT], _substring, True),
                      _overload("string_substring_range", STRING, [STRING, INT, INT], _substring, True)],
        "trim": [_overload("string_trim", STRING, [STRING], lambda text: text.strip(), True)],
        "join": [_overload("list_join", STRING, [LIST], _join, True),
                 _overload("list_join_separator", STRING, [LIST, STRING], _join, True)],
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in functions.items()]


VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer",
             "n")  # ``n``: a resource name, for the library's tests of its resource predicates


@functools.lru_cache(maxsize=1)
def environment() -> Any:
    return cel.NewEnv(variables={name: T.DYN for name in VARIABLES}, extensions=[ext_optional.ExtOptional()],
                      functions=_declarations())


# -- what the API server's CEL has and the binding's lacks: JSONPatch literals --------------------------------

def _fields(literal: str) -> list[tuple[str, str]]:
    """``name: value`` pairs of the message literal whose ``{`` is at ``literal[0]``, split at its top-level commas."""
    parts, _ = split_at_commas(literal)
    found = []
    for part in (p.strip() for p in parts):
        if part:
            name, _, value = part.partition(":")
            found.append((name.strip(), value.strip()))
    return found


JSON_PATCH = "JSONPatch{"


def as_plain(expression: str) -> str:
    """Each ``JSONPatch{op: o, path: p, value: v}`` as ``{'op': o, 'path': p, 'value': v}``: the same fields, which
    is all the API server reads of one (its ``from`` too)."""
    at = expression.find(JSON_PATCH)
    while at >= 0:
        opening = at + len(JSON_PATCH) - 1
        try:
            _, after = split_at_commas(expression, opening)
        except ValueError as exc:
            raise CelError(f"{exc}") from exc
        body = as_plain(expression[opening + 1:after - 1])
        literal = "{" + ", ".join(f"'{name}': {value}" for name, value in _fields("{" + body + "}")) + "}"
        expression = expression[:at] + literal + expression[after:]
        at = expression.find(JSON_PATCH, at + len(literal))
    return expression


@functools.lru_cache(maxsize=4096)
def compiled(expression: str) -> Any:
    """The expression compiled once (policies repeat a few hundred expressions over thousands of pods)."""
    try:
        return environment().compile(as_plain(expression), disable_check=True)
    except RuntimeError as exc:
        raise CelError(f"{exc}") from exc


def _plain(value: Any) -> Any:
    """A value as JSON: whole doubles stay doubles (the API server's JSON Patch keeps the number as CEL made it)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        raise CelError("NaN in a result")
    return value


def evaluate(expression: str, **activation: Any) -> Any:
    """The value of ``expression`` for ``activation`` (``object``, ``variables``, ``params``, ``request``, ...),
    as plain Python values; `CelError` where the API server would report an evaluation error."""
    data = {name: activation.get(name) for name in VARIABLES}
    value = compiled(expression).eval(data=data)
    if value.type() == T.ERROR:
        raise CelError(str(value.plain_value()))
    return _plain(value.plain_value())
