"""Serving traces, read one row at a time: each request's arrival, prompt and output tokens.

| format | file | arrival | prompt | output |
| --- | --- | --- | --- | --- |
| azure | CSV, Azure LLM inference | `TIMESTAMP` (`2023-11-16 18:17:03.97996`) | `ContextTokens` | `GeneratedTokens` |
| mooncake | JSON lines, Mooncake's traces | `timestamp` (ms) | `input_length` | `output_length` |
| burstgpt | CSV, BurstGPT | `Timestamp` (s) | `Request tokens` | `Response tokens` |

Columns are found by their header names, so added columns (BurstGPT's `Model`, `Log Type`,
`Session ID`; Mooncake's `hash_ids`) are read past. Arrivals are taken relative to the first
request and must not go back in time (the traces are sorted; a simulation that streams the
file needs them so). A row that cannot be read stops the import with its line number, the
field and the value: `line 17: ContextTokens: "abc" is not an integer`.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

_INTEGER = re.compile(r"^\s*-?\d+\s*$")


class TraceFormat(StrEnum):
    AZURE = "azure"
    MOONCAKE = "mooncake"
    BURSTGPT = "burstgpt"


class TraceError(ValueError):
    """A trace row that cannot be read: where, which field, what is wrong."""

    def __init__(self, line: int, field: str | None, message: str) -> None:
        super().__init__(f"line {line}: {field}: {message}" if field else f"line {line}: {message}")
        self.line, self.field = line, field


@dataclass(frozen=True, slots=True)
class Request:
    line: int
    arrival_ns: int  # since the trace's first request
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class _Columns:
    arrival: str
    prompt: str
    output: str
    time_ns: Callable[[Any], int]  # an arrival value in nanoseconds (any origin)


def _integer(value: Any, field: str, line: int) -> int:
    if isinstance(value, str) and _INTEGER.match(value) or isinstance(value, int) and not isinstance(value, bool):
        number = int(value)
    else:
        raise TraceError(line, field, f"{json.dumps(value)} is not an integer")
    if number < 0:
        raise TraceError(line, field, f"{number} is negative")
    return number


def _ns(value: Any, unit_ns: int) -> int:
    """A number of `unit_ns` nanoseconds, exactly (Decimal, not a binary fraction)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError
    number = Decimal(str(value).strip()) * unit_ns
    if not number.is_finite():
        raise ValueError
    return int(number.to_integral_value())


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp_ns(value: Any) -> int:
    """Nanoseconds since the epoch of an ISO 8601 time (to the microsecond; without an offset: UTC)."""
    moment = datetime.fromisoformat(str(value).strip())
    return (((moment if moment.tzinfo else moment.replace(tzinfo=UTC)) - EPOCH) // timedelta(microseconds=1)) * 1000


COLUMNS = {
    TraceFormat.AZURE: _Columns("TIMESTAMP", "ContextTokens", "GeneratedTokens", _timestamp_ns),
    TraceFormat.MOONCAKE: _Columns("timestamp", "input_length", "output_length", lambda ms: _ns(ms, 1_000_000)),
    TraceFormat.BURSTGPT: _Columns("Timestamp", "Request tokens", "Response tokens", lambda s: _ns(s, 1_000_000_000)),
}
TIME_FORMS = {
    TraceFormat.AZURE: "a time such as 2023-11-16 18:17:03.9799600",
    TraceFormat.MOONCAKE: "a number of milliseconds",
    TraceFormat.BURSTGPT: "a number of seconds",
}


def _csv_rows(handle: TextIO, columns: _Columns) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise TraceError(1, None, "the file is empty (expected a header row)")
    names = [name.strip() for name in header]
    missing = [c for c in (columns.arrival, columns.prompt, columns.output) if c not in names]
    if missing:
        raise TraceError(1, None, f"the header lacks {', '.join(missing)} (it has {', '.join(names)})")
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            raise TraceError(reader.line_num, None, f"{len(row)} fields where the header has {len(names)}")
        yield reader.line_num, dict(zip(names, row, strict=True))


def _json_rows(handle: TextIO, columns: _Columns) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise TraceError(number, None, f"not JSON: {exc.msg} at column {exc.pos + 1}") from None
        if not isinstance(row, dict):
            raise TraceError(number, None, "not a JSON object")
        for name in (columns.arrival, columns.prompt, columns.output):
            if name not in row:
                raise TraceError(number, name, "missing")
        yield number, row


def read_trace(path: Path, trace_format: TraceFormat) -> Iterator[Request]:
    """The requests of a trace file, read lazily in file order."""
    columns = COLUMNS[trace_format]
    with path.open(newline="", encoding="utf-8") as handle:
        rows = _json_rows(handle, columns) if trace_format is TraceFormat.MOONCAKE else _csv_rows(handle, columns)
        first: int | None = None
        previous = (0, 0)  # line, arrival_ns
        for line, row in rows:
            try:
                time_ns = columns.time_ns(row[columns.arrival])
            except (ValueError, TypeError, OverflowError, ArithmeticError):
                raise TraceError(line, columns.arrival, f"{json.dumps(row[columns.arrival])} is not "
                                 f"{TIME_FORMS[trace_format]}") from None
            first = time_ns if first is None else first
            arrival = time_ns - first
            if arrival < previous[1]:
                raise TraceError(line, columns.arrival, f"{row[columns.arrival]} is earlier than line {previous[0]}'s: "
                                 "sort the trace by time")
            previous = (line, arrival)
            yield Request(line, arrival, _integer(row[columns.prompt], columns.prompt, line),
                          _integer(row[columns.output], columns.output, line))
