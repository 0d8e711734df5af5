"""A discrete simulation of continuous batching: from a trace's requests to the token counts
of a server's forward steps, the M of every GEMM in them.

The scheduler is vLLM's (v1, `vllm/v1/core/sched/scheduler.py`), one forward step at a time:

1. Requests that have arrived by the step's start join the waiting queue, in trace order.
2. Running requests, oldest first, take tokens from the step's budget
   (`max_num_batched_tokens`): one for a request that is decoding, the rest of its prompt (at
   most what the budget has left) for one still in prefill. A request the budget cannot reach
   waits for the next step.
3. Then waiting requests are admitted, first come first served, while fewer than
   `max_num_seqs` run and budget is left, each with as much of its prompt as the budget
   holds. With chunked prefill off a prompt that does not fit whole stops admission until a
   later step (a prompt larger than the whole budget can never run: vLLM refuses such a
   configuration, and so does this simulation).
4. A request whose prompt completes in a step samples its first output token there; each
   later step it takes part in samples one more. A request of G output tokens therefore runs
   its prefill and G - 1 decode steps (G of 0 or 1: its prefill only), then leaves.
5. The step lasts `step_ms + step_us_per_token x its tokens` (a linear cost model), then the
   next one starts; an idle server waits for the next arrival.

The step's token count M = decode tokens + prefill tokens is the M of every GEMM of the
forward pass (vLLM flattens the batch). A request's prefill attention is counted once per
request, over its whole prompt: a chunk of c tokens after o others attends to o x c +
c(c + 1)/2 query-key pairs, and over a prompt's chunks these add up to L(L + 1)/2, the pairs of
one causal attention over the whole prompt of L tokens. Decode attention (one query token against
the KV cache) is another kernel and is not counted here. Assumed away: KV-cache capacity (no preemption),
prefix caching (Mooncake's `hash_ids` are not used), speculative decoding, pipeline parallelism
and the engine's overheads beyond the cost model. Times are integer nanoseconds, so a run is
exact and repeatable: the same trace and parameters give the same counts.

Steps where every running request decodes and nothing can change (no admission, no arrival
that could be admitted, no request finishing) are identical; they are counted in one go
(`fast_forward`), which gives the same counts as stepping them one by one.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from service.workloads.traces import Request


class Serving(BaseModel):
    """What the simulated server does: vLLM's scheduling limits and a step-time model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    chunked_prefill: bool = True
    # the cost model: the right order for an 8B model on one H100-class GPU; set yours from
    # the step times your server logs
    step_ms: float = Field(default=10.0, gt=0)
    step_us_per_token: float = Field(default=50.0, ge=0)
    time_scale: float = Field(default=1.0, gt=0)  # arrival times are multiplied by this (2: half the rate)

    def step_ns(self, tokens: int) -> int:
        return round(self.step_ms * 1e6) + round(self.step_us_per_token * 1e3) * tokens


class SimulationError(ValueError):
    """A request the simulated server can never run."""


@dataclass
class Simulation:
    """Counts of forward steps by tokens (M), by decode batch size and by prefill tokens, and
    of requests by prompt tokens (each request's prefill attention)."""

    requests: int = 0
    skipped: int = 0  # requests without prompt tokens: no server runs them
    steps: int = 0
    duration_ns: int = 0
    peak_waiting: int = 0
    tokens: Counter[int] = field(default_factory=Counter)  # M of a step -> steps
    decode: Counter[int] = field(default_factory=Counter)  # decoding requests of a step (> 0) -> steps
    prefill: Counter[int] = field(default_factory=Counter)  # prompt tokens of a step (> 0) -> steps
    prompts: Counter[int] = field(default_factory=Counter)  # prompt tokens of a request -> requests

    def record(self, decode: int, prefill: int, steps: int = 1) -> None:
        self.steps += steps
        self.tokens[decode + prefill] += steps
        if decode:
            self.decode[decode] += steps
        if prefill:
            self.prefill[prefill] += steps


@dataclass(slots=True)
class _Sequence:
    line: int
    prompt_left: int
    outputs_left: int  # tokens still to sample, the first one at the end of the prefill

    def advance(self, budget: int) -> tuple[int, int]:
        """Schedule this sequence in a step with `budget` tokens left: (decode, prefill) tokens."""
        if not self.prompt_left:
            self.outputs_left -= 1
            return 1, 0
        chunk = min(self.prompt_left, budget)
        self.prompt_left -= chunk
        if not self.prompt_left:
            self.outputs_left -= 1
        return 0, chunk


class _Arrivals:
    """The trace's requests with one of look-ahead, their arrival times scaled."""

    def __init__(self, requests: Iterable[Request], serving: Serving, result: Simulation) -> None:
        self._requests: Iterator[Request] = iter(requests)
        self._serving = serving
        self._result = result
        self._next: Request | None = None
        self._pull()

    def _pull(self) -> None:
        for request in self._requests:
            if request.prompt_tokens == 0:
                self._result.skipped += 1
                continue
            self._result.requests += 1
            self._result.prompts[request.prompt_tokens] += 1
            self._next = request
            return
        self._next = None

    @property
    def next_ns(self) -> int | None:
        return None if self._next is None else round(self._next.arrival_ns * self._serving.time_scale)

    def admit_until(self, now: int, waiting: deque[_Sequence]) -> None:
        while self._next is not None and (self.next_ns or 0) <= now:
            request = self._next
            if not self._serving.chunked_prefill and request.prompt_tokens > self._serving.max_num_batched_tokens:
                raise SimulationError(
                    f"line {request.line}: a prompt of {request.prompt_tokens} tokens never fits a step of "
                    f"{self._serving.max_num_batched_tokens} tokens without chunked prefill; raise "
                    "--max-num-batched-tokens or turn chunked prefill on")
            waiting.append(_Sequence(request.line, request.prompt_tokens, max(request.output_tokens, 1)))
            self._pull()


def _schedule(running: list[_Sequence], waiting: deque[_Sequence], serving: Serving) -> tuple[int, int]:
    """One step: running requests first, then admissions. (decode, prefill) tokens scheduled."""
    budget = serving.max_num_batched_tokens
    decode = prefill = 0
    for sequence in running:
        if not budget:
            break
        d, p = sequence.advance(budget)
        decode, prefill, budget = decode + d, prefill + p, budget - d - p
    while waiting and budget and len(running) < serving.max_num_seqs:
        if not serving.chunked_prefill and waiting[0].prompt_left > budget:
            break
        sequence = waiting.popleft()
        running.append(sequence)
        _, p = sequence.advance(budget)
        prefill, budget = prefill + p, budget - p
    return decode, prefill


def _identical_decode_steps(running: list[_Sequence], waiting: deque[_Sequence], serving: Serving,
                            now: int, next_arrival: int | None) -> int:
    """How many of the coming steps are pure decode steps of these same requests (0: step one
    by one): until the first of them finishes, or an arrival could be admitted."""
    batch = len(running)
    if not batch or batch > serving.max_num_batched_tokens or any(s.prompt_left for s in running):
        return 0
    full = batch >= serving.max_num_seqs
    if waiting and not full:
        return 0
    steps = min(s.outputs_left for s in running)
    if not full and next_arrival is not None:
        steps = min(steps, math.ceil((next_arrival - now) / max(serving.step_ns(batch), 1)))
    return steps


def simulate(requests: Iterable[Request], serving: Serving, *, fast_forward: bool = True) -> Simulation:
    """Run the trace through the scheduler above; the counts of its forward steps."""
    result = Simulation()
    arrivals = _Arrivals(requests, serving, result)
    waiting: deque[_Sequence] = deque()
    running: list[_Sequence] = []
    now = 0
    while True:
        arrivals.admit_until(now, waiting)
        result.peak_waiting = max(result.peak_waiting, len(waiting))
        if not running and not waiting:
            if arrivals.next_ns is None:
                break
            now = arrivals.next_ns
            continue
        steps = _identical_decode_steps(running, waiting, serving, now, arrivals.next_ns) if fast_forward else 0
        if steps:
            for sequence in running:
                sequence.outputs_left -= steps
            result.record(len(running), 0, steps)
            now += steps * serving.step_ns(len(running))
        else:
            decode, prefill = _schedule(running, waiting, serving)
            result.record(decode, prefill)
            now += serving.step_ns(decode + prefill)
        running = [s for s in running if s.outputs_left > 0]
    result.duration_ns = now
    return result
