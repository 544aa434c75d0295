"""Reading DRA device selectors: every form accepted, what counts as "not stated", and fuzzing (it never raises)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.dra.cel import ATTRIBUTE, CAPACITY, Term, read_selector

PRODUCT = Term(ATTRIBUTE, "gpu.nvidia.com", "productName", "==", "NVIDIA A100-SXM4-80GB")


def memory(op: str, value: str = "40Gi") -> Term:
    return Term(CAPACITY, "gpu.nvidia.com", "memory", op, value)


@pytest.mark.parametrize("expression, terms", [
    # the product name: either quote style, either order, field or index access, any whitespace
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"', [PRODUCT]),
    ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'", [PRODUCT]),
    ('device.attributes["gpu.nvidia.com"].productName=="NVIDIA A100-SXM4-80GB"', [PRODUCT]),
    ('  device . attributes [ "gpu.nvidia.com" ] . productName\n  ==  "NVIDIA A100-SXM4-80GB"  ', [PRODUCT]),
    ('device.attributes["gpu.nvidia.com"]["productName"] == "NVIDIA A100-SXM4-80GB"', [PRODUCT]),
    ('"NVIDIA A100-SXM4-80GB" == device.attributes["gpu.nvidia.com"].productName', [PRODUCT]),
    ('(device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB")', [PRODUCT]),
    # the memory: compareTo with >=, > and ==, isGreaterThan, == quantity
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', [memory(">=")]),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0", [memory(">")]),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) == 0', [memory("==")]),
    ('device.capacity["gpu.nvidia.com"]["memory"] . compareTo( quantity( "40Gi" ) )>=0', [memory(">=")]),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", [memory(">")]),
    ('device.capacity["gpu.nvidia.com"].memory == quantity("64Gi")', [memory("==", "64Gi")]),
    # && between them, and beside terms that are not read (each conjunct must hold on its own)
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" && '
     'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', [PRODUCT, memory(">=")]),
    ("device.attributes['gpu.nvidia.com'].type == 'gpu' && "
     "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",
     [Term(ATTRIBUTE, "gpu.nvidia.com", "type", "==", "gpu"), PRODUCT]),
    ('device.driver == "gpu.nvidia.com" && (device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
     ' && device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB")', [memory(">="), PRODUCT]),
    ('(a || b) && device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"', [PRODUCT]),
    ('has(device.capacity["gpu.nvidia.com"].memory) && '
     'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', [memory(">=")]),
])
def test_forms_that_are_read(expression: str, terms: list[Term]) -> None:
    assert list(read_selector(expression)) == terms


@pytest.mark.parametrize("expression", [
    # a term under || or ?: need not hold
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" || true',
    'x ? device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" : true',
    # not equality, not on the attribute itself, not a plain literal
    'device.attributes["gpu.nvidia.com"].productName != "NVIDIA A100-SXM4-80GB"',
    'device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]',
    'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")',
    'device.attributes["gpu.nvidia.com"].productName.lowerAscii() == "nvidia a100-sxm4-80gb"',
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB".lowerAscii()',
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA \\"A100\\""',
    '!(device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB")',
    'device.attributes["gpu.nvidia.com"].?productName.orValue("") == "NVIDIA A100-SXM4-80GB"',
    # memory: another comparison, or AMD's guarded form (cel.bind)
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) < 0',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 1',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 + 0',
    'device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("40Gi"))',
    'cel.bind(cap, device.capacity["gpu.amd.com"], has(cap.memory) && cap.memory.compareTo(quantity("16Gi")) >= 0)',
    # not CEL at all, or cut off
    "", "(", ")", "'", '"', "&&", "device.attributes[", 'device.attributes["gpu.nvidia.com"].productName == "x',
])
def test_forms_that_state_nothing(expression: str) -> None:
    assert read_selector(expression) == ()


KNOWN = [
    ('device.attributes["{d}"].productName == "{v}"', lambda d, v: Term(ATTRIBUTE, d, "productName", "==", v)),
    ("'{v}' == device.attributes['{d}']['productName']", lambda d, v: Term(ATTRIBUTE, d, "productName", "==", v)),
    ('device.capacity["{d}"].memory.compareTo(quantity("{q}")) >= 0',
     lambda d, q: Term(CAPACITY, d, "memory", ">=", q)),
    ("device.capacity['{d}'].memory.isGreaterThan(quantity('{q}'))", lambda d, q: Term(CAPACITY, d, "memory", ">", q)),
]
UNKNOWN = ['device.driver == "gpu.nvidia.com"', "true", "size(device.attributes) > 2", "(a || b)",
           'device.attributes["x"].y.matches("&&|")', "[1, 2].exists(i, i > 1 && i < 3)"]
domains = st.sampled_from(["gpu.nvidia.com", "gpu.amd.com", "example.com"])
values = st.text(st.characters(codec="ascii", exclude_characters="\"'\\\n"), max_size=20)
quantities = st.sampled_from(["40Gi", "80G", "1536Mi", "0", "10"])
spaces = st.sampled_from(["", " ", "  ", "\n  "])


@st.composite
def conjunctions(draw: st.DrawFn) -> tuple[str, list[Term]]:
    """A conjunction of known and unknown terms, the known ones with what reading them must give."""
    parts: list[str] = []
    expected: list[Term] = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            template, term = draw(st.sampled_from(KNOWN))
            domain = draw(domains)
            value = draw(quantities) if "quantity" in template else draw(values)
            text = template.format(d=domain, v=value, q=value)
            if draw(st.booleans()):
                text = f"({text})"
            parts.append(text)
            expected.append(term(domain, value))
        else:
            parts.append(draw(st.sampled_from(UNKNOWN)))
    return f"{draw(spaces)}&&{draw(spaces)}".join(parts), expected


@settings(max_examples=300, deadline=None)
@given(conjunctions())
def test_every_known_term_of_a_conjunction_is_read(case: tuple[str, list[Term]]) -> None:
    expression, expected = case
    assert list(read_selector(expression)) == expected


@settings(max_examples=200, deadline=None)
@given(conjunctions(), conjunctions())
def test_an_alternative_states_nothing(left: tuple[str, list[Term]], right: tuple[str, list[Term]]) -> None:
    assert read_selector(f"{left[0]} || {right[0]}") == ()
    assert read_selector(f"c ? {left[0]} : {right[0]}") == ()


CEL_ALPHABET = st.sampled_from(list("device.attributescapacity[]()'\"\\ &|!?:=<>0123456789GiMproductNamemory,_-\n")
                               + ["&&", "||", "==", ">=", "quantity(", "compareTo(", "productName", "memory"])


@settings(max_examples=1000, deadline=None)
@given(st.lists(CEL_ALPHABET, max_size=60).map("".join) | st.text(max_size=200))
def test_never_raises(expression: str) -> None:
    terms = read_selector(expression)
    assert isinstance(terms, tuple) and all(isinstance(t, Term) for t in terms)
