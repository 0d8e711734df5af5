"""The continuous-batching simulation against traces worked out by hand, and its shortcut
against stepping one step at a time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workload_factory import SMALL_TRACE, write_trace

from service.workloads.batching import Serving, SimulationError, simulate
from service.workloads.mix import Bin, RequestBin, TraceInfo, histogram, nearest_bucket, traffic_mix
from service.workloads.traces import Request, TraceFormat, read_trace
from wire.contract import WorkloadShape

ONE_SECOND_STEPS = {"step_ms": 1000.0, "step_us_per_token": 0.0}


def requests(rows: list[tuple[float, int, int]]) -> list[Request]:
    return [Request(i + 2, round(t * 1e9), p, o) for i, (t, p, o) in enumerate(rows)]


@pytest.mark.parametrize("trace_format", list(TraceFormat))
def test_the_small_trace_by_hand(tmp_path: Path, trace_format: TraceFormat) -> None:
    """max_num_seqs 2, max_num_batched_tokens 8, chunked prefill, every step 1 s.
    A (t=0, prompt 5, 3 out), B (t=0, prompt 6, 2 out), C (t=1, prompt 2, 1 out).

    step 1, t=0: waiting A, B. A's whole prompt (5) leaves 3 of 8; B is admitted with a chunk
                 of 3 of its 6. M = 8 (prefill 8). A samples its 1st token.
    step 2, t=1: C arrives and waits (2 running = max_num_seqs). A decodes (1); B's last 3
                 prompt tokens: its 1st token. M = 4 (decode 1, prefill 3).
    step 3, t=2: A and B decode: M = 2. A has 3 tokens, B 2: both leave.
    step 4, t=3: C's prompt (2), its only token: M = 2 (prefill 2). It leaves; the run ends at 4 s.
    """
    serving = Serving(max_num_seqs=2, max_num_batched_tokens=8, **ONE_SECOND_STEPS)
    result = simulate(read_trace(write_trace(tmp_path, trace_format, SMALL_TRACE), trace_format), serving)
    assert (result.requests, result.steps, result.duration_ns, result.peak_waiting) == (3, 4, 4_000_000_000, 2)
    assert result.tokens == Counter({8: 1, 4: 1, 2: 2})
    assert result.decode == Counter({1: 1, 2: 1})
    assert result.prefill == Counter({8: 1, 3: 1, 2: 1})

    trace = TraceInfo(file="t", format=trace_format, sha256="0" * 64, requests=3, skipped=0)
    mix = traffic_mix(result, trace, serving, [1, 2, 4, 8])
    assert mix.workload == [WorkloadShape(dims={"m": 2}, weight=0.5), WorkloadShape(dims={"m": 4}, weight=0.25),
                            WorkloadShape(dims={"m": 8}, weight=0.25)]
    assert mix.tokens_per_step == 4.0
    # prefill 3 is as near 2 as 4: the smaller bucket, as vLLM's nearest-key lookup over ascending keys
    assert mix.prefill_tokens == [Bin(bucket=2, steps=2), Bin(bucket=8, steps=1)]
    # attention: one causal prefill per request over its prompt (5, 6 and 2 tokens), by nearest
    # sequence bucket (6 is as near 4 as 8: the smaller); prompt tokens 13 of the steps' 16
    assert result.prompts == Counter({5: 1, 6: 1, 2: 1})
    mix = traffic_mix(result, trace, serving, [1, 2, 4, 8], seq_buckets=[2, 4, 8])
    assert mix.prompts == [RequestBin(bucket=2, requests=1), RequestBin(bucket=4, requests=2)]
    assert [(s.dims, s.weight) for s in mix.attention] == [({"seq": 2}, pytest.approx(1 / 3)),
                                                           ({"seq": 4}, pytest.approx(2 / 3))]
    assert mix.prompt_token_share == pytest.approx(13 / 16)


def test_without_chunked_prefill_a_prompt_waits_to_fit_whole() -> None:
    """The same trace, chunked prefill off.

    step 1, t=0: A's prompt (5) fits; B's (6) does not fit the 3 left: admission stops. M = 5.
    step 2, t=1: C arrives behind B. A decodes (1); B's 6 fit the 7 left: M = 7 (decode 1, prefill 6).
    step 3, t=2: A and B decode (M = 2) and leave.  step 4, t=3: C's prompt: M = 2.
    """
    serving = Serving(max_num_seqs=2, max_num_batched_tokens=8, chunked_prefill=False, **ONE_SECOND_STEPS)
    result = simulate(requests(SMALL_TRACE), serving)
    assert result.tokens == Counter({5: 1, 7: 1, 2: 2})
    assert result.decode == Counter({1: 1, 2: 1}) and result.prefill == Counter({5: 1, 6: 1, 2: 1})
    with pytest.raises(SimulationError, match="line 3: a prompt of 6 tokens never fits a step of 5 tokens"):
        simulate(requests(SMALL_TRACE), serving.model_copy(update={"max_num_batched_tokens": 5}))


@pytest.mark.parametrize(("arrival_ms", "time_scale", "steps", "duration_ms"), [
    (25, 1.0, Counter({20: 1, 11: 1}), 51),
    (31, 1.0, Counter({20: 1, 1: 1, 10: 1}), 61),
    (31, 0.5, Counter({20: 1, 11: 1}), 51),  # arrivals at twice the rate: 15.5 ms
])
def test_the_cost_model_decides_which_step_an_arrival_joins(arrival_ms: int, time_scale: float, steps: Counter[int],
                                                            duration_ms: int) -> None:
    """Steps of 10 ms + 1 ms per token. R1 (t=0, prompt 20, 2 out), R2 (prompt 10, 1 out).

    step 1 at 0: R1's prompt, M = 20, 30 ms. Next step at 30 ms.
    R2 at 25 ms: step 2 at 30: R1 decodes, R2's prompt: M = 11, 21 ms; both leave at 51 ms.
    R2 at 31 ms: step 2 at 30: R1 decodes alone, M = 1, 11 ms; step 3 at 41: R2's prompt,
    M = 10, 20 ms; the run ends at 61 ms.
    """
    serving = Serving(max_num_batched_tokens=100, step_ms=10, step_us_per_token=1000, time_scale=time_scale)
    result = simulate(requests([(0, 20, 2), (arrival_ms / 1000, 10, 1)]), serving)
    assert (result.tokens, result.duration_ns) == (steps, duration_ms * 1_000_000)


def test_max_num_seqs_and_the_token_budget() -> None:
    """One request at a time: R1 (prompt 3, 3 out) then R2 (prompt 2, 1 out), both at t=0:
    M = 3, 1, 1 (R1), then 2 (R2). A budget of 2 tokens and three 1-token prompts of 3
    outputs: A and B's prefill (2), their two decode steps (2, 2); then C's prefill (1) and
    its two decode steps (1, 1): running requests take the budget before admissions."""
    one_at_a_time = simulate(requests([(0, 3, 3), (0, 2, 1)]), Serving(max_num_seqs=1, **ONE_SECOND_STEPS))
    assert one_at_a_time.tokens == Counter({3: 1, 1: 2, 2: 1}) and one_at_a_time.peak_waiting == 2
    budget_of_two = simulate(requests([(0, 1, 3), (0, 1, 3), (0, 1, 3)]),
                             Serving(max_num_batched_tokens=2, **ONE_SECOND_STEPS))
    assert budget_of_two.tokens == Counter({2: 3, 1: 3})
    assert budget_of_two.decode == Counter({2: 2, 1: 2})


def test_requests_without_a_prompt_are_skipped_and_counted() -> None:
    result = simulate(requests([(0, 0, 10), (0, 4, 0)]), Serving(**ONE_SECOND_STEPS))
    assert (result.requests, result.skipped, result.tokens) == (1, 1, Counter({4: 1}))  # 0 out: its prefill only


def test_the_same_trace_gives_the_same_weights(tmp_path: Path) -> None:
    rows = [(i * 0.013, 100 + (i * 37) % 900, 1 + (i * 11) % 60) for i in range(300)]
    path = write_trace(tmp_path, "burstgpt", rows)
    serving = Serving(max_num_seqs=16, max_num_batched_tokens=512)
    trace = TraceInfo(file="t", format=TraceFormat.BURSTGPT, sha256="0" * 64, requests=300, skipped=0)
    first, second = (traffic_mix(simulate(read_trace(path, TraceFormat.BURSTGPT), serving), trace, serving,
                                 [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]) for _ in range(2))
    assert first.model_dump_json() == second.model_dump_json()
    assert abs(sum(s.weight for s in first.workload) - 1) < 1e-12 and len(first.workload) > 3


def test_nearest_bucket() -> None:
    buckets = [1, 2, 4, 8, 16, 24, 32]
    assert [nearest_bucket(buckets, m) for m in (1, 3, 5, 6, 7, 12, 20, 28, 29, 5000)] == [1, 2, 4, 4, 8, 8, 16, 24,
                                                                                           32, 32]
    assert histogram({3: 2, 2: 1, 100: 4}, [2, 4, 64]) == [Bin(bucket=2, steps=3), Bin(bucket=64, steps=4)]


trace_rows = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 300), st.integers(0, 40)), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(rows=trace_rows, seqs=st.integers(1, 8), budget=st.integers(1, 400), chunked=st.booleans(),
       step_ms=st.integers(1, 30), per_token_us=st.integers(0, 200))
def test_counting_identical_decode_steps_at_once_is_exact(rows: list[tuple[int, int, int]], seqs: int, budget: int,
                                                          chunked: bool, step_ms: int, per_token_us: int) -> None:
    rows = sorted(rows)
    if not chunked:
        budget = max(budget, max(p for _, p, _ in rows))
    trace = [Request(i + 2, t * 1_000_000, p, o) for i, (t, p, o) in enumerate(rows)]
    serving = Serving(max_num_seqs=seqs, max_num_batched_tokens=budget, chunked_prefill=chunked, step_ms=step_ms,
                      step_us_per_token=per_token_us)
    assert simulate(trace, serving) == simulate(trace, serving, fast_forward=False)
