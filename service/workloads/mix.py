"""From a simulation's step counts to a study's workload: M buckets and their weights.

A step's M goes to the nearest bucket, the smaller one on a tie: that is how vLLM picks the
tuned configuration of a batch size from its file's M keys, so a bucket's weight is the share
of forward steps that its configuration serves. Buckets no step falls in are left out (a
study's shapes need a weight above zero).

Attention's workload is the requests' prefill attention: each request's prompt length goes to
the nearest sequence bucket the same way, and a bucket's weight is its share of requests
(`attention`, the sequence in dim `seq`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.workloads.batching import Serving, Simulation
from service.workloads.traces import TraceFormat
from wire.contract import WorkloadShape

# the batch sizes vLLM's fused-MoE tuning writes (benchmarks/kernels/benchmark_moe.py)
VLLM_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
# prompt lengths for attention's sequence: powers of two, as attention kernels' tiles divide them
SEQ_BUCKETS = tuple(1 << n for n in range(7, 16))  # 128 ... 32768
SEQ_DIM = "seq"


def nearest_bucket(buckets: Sequence[int], value: int) -> int:
    return min(buckets, key=lambda bucket: (abs(bucket - value), bucket))


def parse_buckets(text: str) -> tuple[int, ...]:
    """"1,2,4,8" -> (1, 2, 4, 8); sorted, each once, all positive."""
    try:
        values = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError:
        raise ValueError(f"buckets {text!r}: write positive integers separated by commas, e.g. 1,2,4,8") from None
    if not values or values[0] < 1:
        raise ValueError(f"buckets {text!r}: give at least one, each at least 1")
    return tuple(values)


class Bin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bucket: int
    steps: int


class RequestBin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bucket: int
    requests: int


def _binned(counts: Mapping[int, int], buckets: Sequence[int]) -> dict[int, int]:
    """Counts per nearest bucket, ascending, empty buckets left out."""
    binned: dict[int, int] = {}
    for value, count in counts.items():
        bucket = nearest_bucket(buckets, value)
        binned[bucket] = binned.get(bucket, 0) + count
    return dict(sorted(binned.items()))


def histogram(counts: Mapping[int, int], buckets: Sequence[int]) -> list[Bin]:
    """Steps per bucket, ascending, empty buckets left out."""
    return [Bin(bucket=b, steps=n) for b, n in _binned(counts, buckets).items()]


class TraceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    format: TraceFormat
    sha256: str
    requests: int
    skipped: int  # without prompt tokens


class TrafficMix(BaseModel):
    """What `paretune workload import` derives from a trace; `workload` is a study's
    `kernel.workload` (the tokens of a step in `dim`)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["paretune-workload"] = "paretune-workload"
    format_version: Literal[1] = 1
    trace: TraceInfo
    serving: Serving
    steps: int
    duration_s: float
    tokens_per_step: float  # the mean M, before bucketing
    peak_waiting: int  # the longest queue: above the server's concurrency, it fell behind the trace
    dim: str
    buckets: list[int]
    workload: list[WorkloadShape]
    decode_batch: list[Bin]  # steps by requests decoding in them
    prefill_tokens: list[Bin]  # steps by prompt tokens in them
    tokens: list[Bin] = Field(description="steps by M, the counts behind `workload`")
    # attention (files of earlier releases lack these: import the trace again)
    seq_buckets: list[int] = Field(default_factory=list)
    prompts: list[RequestBin] = Field(default_factory=list, description="requests by prompt tokens")
    attention: list[WorkloadShape] = Field(
        default_factory=list, description="prefill attention: prompt lengths in dim `seq`, weighted by requests")
    prompt_token_share: float = Field(0.0, description="prompt tokens over all tokens of the steps")

    def shapes_for(self, kind: str) -> tuple[list[WorkloadShape], str]:
        """The shapes that fill a kernel of this kind, and the dim that holds their tokens."""
        if kind != "attention":
            return self.workload, self.dim
        if not self.attention:
            raise ValueError("this workload file has no prompt lengths (an earlier release wrote it): "
                             "import the trace again with `paretune workload import`")
        return self.attention, SEQ_DIM


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _share(part: int, whole: int) -> float:
    """part / whole, 0 for nothing at all."""
    return part / whole if whole else 0.0


def traffic_mix(simulation: Simulation, trace: TraceInfo, serving: Serving, buckets: Sequence[int],
                dim: str = "m", seq_buckets: Sequence[int] = SEQ_BUCKETS) -> TrafficMix:
    tokens = histogram(simulation.tokens, buckets)
    total = sum(b.steps for b in tokens)
    all_tokens = sum(m * n for m, n in simulation.tokens.items())
    prompts = [RequestBin(bucket=b, requests=n) for b, n in _binned(simulation.prompts, seq_buckets).items()]
    requests = sum(b.requests for b in prompts)
    return TrafficMix(
        trace=trace, serving=serving, steps=simulation.steps, duration_s=simulation.duration_ns / 1e9,
        tokens_per_step=_share(all_tokens, total),
        peak_waiting=simulation.peak_waiting, dim=dim, buckets=list(buckets),
        workload=[WorkloadShape(dims={dim: b.bucket}, weight=b.steps / total) for b in tokens],
        decode_batch=histogram(simulation.decode, buckets), prefill_tokens=histogram(simulation.prefill, buckets),
        tokens=tokens, seq_buckets=list(seq_buckets), prompts=prompts,
        prompt_token_share=_share(sum(n * c for n, c in simulation.prompts.items()), all_tokens),
        attention=[WorkloadShape(dims={SEQ_DIM: b.bucket}, weight=b.requests / requests) for b in prompts],
    )
