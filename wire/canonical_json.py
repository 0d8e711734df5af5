"""Canonical JSON: one byte string per JSON value, so that a hash or a signature over a
document does not depend on how it was formatted. The scheme is RFC 8785 (JSON
Canonicalization Scheme, JCS), restricted to what paretune documents hold:

- objects: members sorted by key, compared as sequences of UTF-16 code units (the same as
  code point order except between characters above U+FFFF and those in U+E000..U+FFFF);
  duplicate keys are refused by `loads`;
- no whitespace outside strings; `,` between members and elements, `:` after keys;
- strings: UTF-8; only `"`, `\\` and the control characters U+0000..U+001F are escaped,
  as `\\"`, `\\\\`, `\\b`, `\\t`, `\\n`, `\\f`, `\\r` or `\\u00xx` (lower-case hex); every
  other character is written as itself; lone surrogates are refused;
- numbers: as ECMAScript's Number.prototype.toString writes the IEEE-754 double: the
  shortest digits that read back to the same double, plain notation for magnitudes in
  [1e-6, 1e21) (`0.000001`, `100`, `1.5`), otherwise `d.ddde+N` / `d.ddde-N`; integral
  values without a fraction (`2.0` is `2`), `-0` as `0`; integers beyond 2**53 in magnitude,
  NaN and infinities are refused (they do not survive a round trip through a double);
- `true`, `false`, `null`.

Because every JSON value has exactly one canonical form, a file written canonically can be
checked byte for byte: re-encoding what was parsed must give back the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

MAX_EXACT_INT = 2**53


class CanonicalJsonError(ValueError):
    """The value has no canonical JSON form (NaN, a huge integer, a non-string key, ...)."""


def dumps(value: Any) -> bytes:
    """The canonical UTF-8 bytes of a JSON value built from dict, list, str, int, float,
    bool and None."""
    parts: list[str] = []
    _encode(value, parts)
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJsonError(f"a string holds a lone surrogate: {exc}") from None


def loads(data: bytes | str) -> Any:
    """Parse JSON, refusing duplicate keys and non-finite numbers (which canonical JSON
    cannot carry); numbers with a fraction or exponent, or integers beyond 2**53, become
    floats, other integers ints."""
    try:
        return json.loads(data, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_int=_integer)
    except CanonicalJsonError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise CanonicalJsonError(f"not valid JSON: {exc}") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise CanonicalJsonError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _integer(text: str) -> int | float:
    """An integer, or the double it stands for beyond 2**53 (as a canonical float prints)."""
    value = int(text)
    return value if abs(value) <= MAX_EXACT_INT else float(value)


def _no_constant(name: str) -> Any:
    raise CanonicalJsonError(f"{name} is not a JSON number")


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        if abs(value) > MAX_EXACT_INT:
            raise CanonicalJsonError(f"integer {value} is beyond 2**53: write it as a string")
        out.append(str(value))
    elif isinstance(value, float):
        out.append(format_number(value))
    elif isinstance(value, Mapping):
        keys = list(value)
        if not all(isinstance(k, str) for k in keys):
            raise CanonicalJsonError(f"object keys must be strings, got {keys!r}")
        out.append("{")
        for index, key in enumerate(sorted(keys, key=_utf16_key)):
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise CanonicalJsonError(f"{type(value).__name__} is not a JSON value")


def format_number(value: float) -> str:
    """ECMAScript's Number.prototype.toString of a finite double (RFC 8785 section 3.2.2.3)."""
    if not math.isfinite(value):
        raise CanonicalJsonError(f"{value} is not a JSON number")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that round-trip (the digits ECMAScript also picks);
    # only the layout differs.
    mantissa, _, exponent_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    exponent10 = int(exponent_text) if exponent_text else 0
    # 0.000ddd: the point sits before the fraction's leading zeros
    leading_zeros = len(fraction) - len(fraction.lstrip("0")) if whole == "0" else 0
    point = exponent10 + (len(whole) if whole != "0" else 0) - leading_zeros
    # value = 0.<digits> x 10**point, digits without leading or trailing zeros
    digits = (whole + fraction).strip("0")
    count = len(digits)
    if count <= point <= 21:
        text = digits + "0" * (point - count)
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * (-point) + digits
    else:
        exponent = point - 1
        head = digits[0] + ("." + digits[1:] if count > 1 else "")
        text = f"{head}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"
    return sign + text
