"""The offline CEL engine (`tests.support.cel_engine`) answers as the API server's environment does, for what the
generated policies call: quantities, the list libraries, the strings extension, JSON Patch literals, optionals,
and an error where cel-go reports one."""

from __future__ import annotations

import pytest

from tests.support.cel_engine import CelError, as_plain, evaluate


@pytest.mark.parametrize("expression,value", [
    ("quantity('2').isInteger()", True),
    ("quantity('500m').isInteger()", False),
    ("quantity('1k').asInteger()", 1000),
    ("quantity('64Gi').asApproximateFloat()", 68719476736.0),
    ("quantity('2').isGreaterThan(quantity('0'))", True),
    ("quantity('0').isLessThan(quantity('0'))", False),
    ("isQuantity('40Gi') && !isQuantity('lots')", True),
    ("[3, 1, 2].sum()", 6),
    ("[3, 1, 2].max()", 3),
    ("[2.5, 1.0].min()", 1.0),
    ("['a', 'b', 'a'].indexOf('a')", 0),
    ("['a', 'b', 'a'].lastIndexOf('a')", 2),
    ("[1, 2].isSorted()", True),
    ("lists.range(3)", [0, 1, 2]),
    ("[[1], [2, 3]].flatten()", [1, 2, 3]),
    ("['b', 'a', 'b'].distinct()", ["b", "a"]),
    ("['b', 'a'].sort()", ["a", "b"]),
    ("[1, 2, 3].slice(1, 3)", [2, 3]),
    ("'a,b'.split(',')", ["a", "b"]),
    ("' x '.trim()", "x"),
    ("'AbC'.lowerAscii()", "abc"),
    ("'a_b_c'.replace('_', '-')", "a-b-c"),
    ("'abc'.substring(1, 2)", "b"),
    ("'abcb'.lastIndexOf('b')", 3),
    ("'abc'.indexOf('c')", 2),
    ("['x', 'y'].join(',')", "x,y"),
    ("jsonpatch.escapeKey('ai-admission.io/x~y')", "ai-admission.io~1x~0y"),
    ("object.?spec.?x.orValue(1)", 1),
    ("{?'a': optional.none(), 'b': 1}", {"b": 1}),
])
def test_the_kubernetes_libraries(expression: str, value: object) -> None:
    assert evaluate(expression, object={"spec": {}}) == value


def test_a_json_patch_literal_is_the_map_of_its_fields() -> None:
    assert as_plain("[JSONPatch{op: 'add', path: '/a', value: {'b': JSONPatch{op: 'x'}}}]") == \
        "[{'op': 'add', 'path': '/a', 'value': {'b': {'op': 'x'}}}]"
    assert evaluate("[JSONPatch{op: 'add', path: '/spec/x', value: [1, 2]}]") == [
        {"op": "add", "path": "/spec/x", "value": [1, 2]}]


@pytest.mark.parametrize("expression", ["quantity('lots')", "[].max()", "object.missing", "1 / 0", "[1].join(',')",
                                        "'abc'.substring(4)"])
def test_an_error_is_raised_where_cel_go_reports_one(expression: str) -> None:
    with pytest.raises(CelError):
        evaluate(expression, object={})


def test_false_and_an_error_is_false_as_cel_go_absorbs_it() -> None:
    assert evaluate("false && object.missing == 1", object={}) is False
    assert evaluate("object.missing == 1 || true", object={}) is True
