"""Reading serving traces: the public formats' columns, streaming, and errors that name the
line, the field and the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from workload_factory import SMALL_TRACE, write_trace

from service.workloads.traces import Request, TraceError, TraceFormat, read_trace

EXPECTED = [Request(2, 0, 5, 3), Request(3, 0, 6, 2), Request(4, 1_000_000_000, 2, 1)]


@pytest.mark.parametrize("trace_format", list(TraceFormat))
def test_each_format_reads_to_the_same_requests(tmp_path: Path, trace_format: TraceFormat) -> None:
    requests = list(read_trace(write_trace(tmp_path, trace_format, SMALL_TRACE), trace_format))
    if trace_format is TraceFormat.MOONCAKE:  # JSON lines have no header: line numbers start at 1
        assert requests == [Request(r.line - 1, r.arrival_ns, r.prompt_tokens, r.output_tokens) for r in EXPECTED]
    else:
        assert requests == EXPECTED


def test_azure_times_keep_their_fraction_and_offset(tmp_path: Path) -> None:
    trace = tmp_path / "code.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.9799600,4808,10\n"
                     "2023-11-16 18:17:04.0319600,3180,8\n"
                     "2023-11-16 18:17:04.0319600+00:00,110,27\n")
    assert [r.arrival_ns for r in read_trace(trace, TraceFormat.AZURE)] == [0, 52_000_000, 52_000_000]


def test_burstgpt_columns_are_found_by_name(tmp_path: Path) -> None:
    trace = tmp_path / "BurstGPT_with_sessions.csv"
    trace.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,17,1.5,ChatGPT,472,18,490,Conversation log\n"
                     "45.5,17,2.0,GPT-4,1024,0,1024,API log\n")
    expected = [Request(2, 0, 472, 18), Request(3, 40_500_000_000, 1024, 0)]
    assert list(read_trace(trace, TraceFormat.BURSTGPT)) == expected


MALFORMED = {
    TraceFormat.AZURE: ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97996,4808,10\n"
                        "2023-11-16 18:17:04.03196,abc,8\n", 'line 3: ContextTokens: "abc" is not an integer'),
    TraceFormat.MOONCAKE: ('{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}\n'
                           '{"timestamp": 3000, "input_length": "12x", "output_length": 490, "hash_ids": [0]}\n',
                           'line 2: input_length: "12x" is not an integer'),
    TraceFormat.BURSTGPT: ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                           "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1000,12,1012,API log\n"
                           "soon,GPT-4,30,-,30,API log\n", 'line 4: Timestamp: "soon" is not a number of seconds'),
}


@pytest.mark.parametrize("trace_format", list(TraceFormat))
def test_a_malformed_row_names_line_and_field_after_the_rows_before_it(tmp_path: Path,
                                                                        trace_format: TraceFormat) -> None:
    text, message = MALFORMED[trace_format]
    trace = tmp_path / "trace"
    trace.write_text(text)
    requests = read_trace(trace, trace_format)
    assert next(requests).line in (1, 2)  # streamed: the good rows come before the bad one is read
    with pytest.raises(TraceError) as error:
        list(requests)
    assert str(error.value) == message


@pytest.mark.parametrize(("text", "trace_format", "message"), [
    ("TIMESTAMP,Context,GeneratedTokens\n", TraceFormat.AZURE,
     "line 1: the header lacks ContextTokens (it has TIMESTAMP, Context, GeneratedTokens)"),
    ("", TraceFormat.BURSTGPT, "line 1: the file is empty (expected a header row)"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,5,-2\n", TraceFormat.AZURE,
     "line 2: GeneratedTokens: -2 is negative"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,5\n", TraceFormat.AZURE,
     "line 2: 2 fields where the header has 3"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n", TraceFormat.AZURE,
     'line 2: TIMESTAMP: "yesterday" is not a time such as 2023-11-16 18:17:03.9799600'),
    ('{"timestamp": 0, "input_length": 5}\n', TraceFormat.MOONCAKE, "line 1: output_length: missing"),
    ('{"timestamp": 0, "input_length": 5, "output_length": true}\n', TraceFormat.MOONCAKE,
     "line 1: output_length: true is not an integer"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 3000,\n', TraceFormat.MOONCAKE,
     "line 2: not JSON: Expecting property name enclosed in double quotes at column 20"),
    ('{"timestamp": 3000, "input_length": 5, "output_length": 1}\n\n'
     '{"timestamp": 0, "input_length": 5, "output_length": 1}\n', TraceFormat.MOONCAKE,
     "line 3: timestamp: 0 is earlier than line 1's: sort the trace by time"),
])
def test_errors(tmp_path: Path, text: str, trace_format: TraceFormat, message: str) -> None:
    trace = tmp_path / "trace"
    trace.write_text(text)
    with pytest.raises(TraceError) as error:
        list(read_trace(trace, trace_format))
    assert str(error.value) == message
