"""Canonical JSON against RFC 8785's published examples, and its round-trip properties."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import canonical_json
from wire.canonical_json import CanonicalJsonError, dumps, format_number, loads

# RFC 8785 Appendix B: IEEE-754 bit patterns and their serialisation
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B)
def test_numbers_as_rfc8785_appendix_b(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert format_number(value) == expected
    assert dumps(value) == expected.encode()


def test_rfc8785_transformation_example() -> None:
    # RFC 8785 section 3.2.4: the whole transformation of one object
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert dumps(loads(source)) == expected.encode("utf-8")


def test_keys_sort_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: the emoji (a surrogate pair in UTF-16) sorts before U+FB33
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    order = list(json.loads(dumps(value)).values())
    assert order == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 2**53 + 1, -(2**53) - 1, {1: "a"}, b"bytes", {"s": "\ud800"}],
)
def test_values_without_a_canonical_form_are_refused(value: object) -> None:
    with pytest.raises(CanonicalJsonError):
        dumps(value)


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"a": NaN}', "[Infinity]", "{", '{"a": 1} x'])
def test_loads_refuses_duplicates_and_non_json(text: str) -> None:
    with pytest.raises(CanonicalJsonError):
        loads(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300)
@given(json_values)
def test_canonical_form_is_a_fixed_point_and_keeps_the_value(value: object) -> None:
    data = dumps(value)
    assert dumps(loads(data)) == data
    assert loads(data) == value
    assert _same(json.loads(data), value)  # Python's own parser reads the same value back


def _same(a: object, b: object) -> bool:
    """Equal as JSON values, numbers compared as doubles (JSON has one number type)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=500)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_round_trip_with_the_fewest_digits(value: float) -> None:
    text = format_number(value)
    assert float(text) == value
    digits = text.lstrip("-").split("e")[0].replace(".", "").strip("0")
    shortest = repr(abs(value)).split("e")[0].replace(".", "").strip("0")
    assert len(digits) == len(shortest) or value == 0
    assert canonical_json.loads(text) == value
