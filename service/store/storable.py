"""JSON that both databases store as it is: a worker's report may hold anything its kernel
printed or measured, and one NUL character or NaN must not make the report unstorable
(Postgres text and JSONB refuse NUL; JSON has no NaN or infinity and JSONB refuses them)."""

from __future__ import annotations

import math
from typing import Any

REPLACEMENT = "\ufffd"


def storable_text(text: str) -> str:
    return text.replace("\x00", REPLACEMENT) if "\x00" in text else text


def storable(value: Any) -> Any:
    """`value` with NUL characters in text and keys replaced by U+FFFD and non-finite
    numbers by null; everything else unchanged."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable_text(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value
