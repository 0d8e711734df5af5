"""GPU timers: hot time per call from CUDA-graph replay, cold latency with L2 flushed.

Two kinds of time rank configurations differently (docs/measurement.md):

- *hot*: calls back to back, as a busy server runs them. A CUDA graph of G calls is replayed
  R times for about `window_s`; CUDA events between replays give one per-call sample per
  replay (replay time / G). Launch overhead is gone and the GPU never idles inside the window.
- *cold*: one call with L2 flushed before it, timed by a pair of CUDA events. The flush (a
  write over a buffer several times the L2) runs on the GPU just before the start event, so
  the host's launch overhead is hidden behind it rather than counted.

Launches are closures that enqueue one call on torch's current stream. The planning helpers
at the top are pure and tested on the CPU; the rest imports torch lazily.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Launch = Callable[[], None]

TARGET_REPLAY_S = 0.01  # one graph replay: long enough to amortise the per-replay gap
MAX_CALLS_PER_GRAPH = 1000
FLUSH_BYTES = 256 * 1024 * 1024  # several times the H200's 60 MB L2


def plan_calls_per_graph(
    call_s: float, target_replay_s: float = TARGET_REPLAY_S, max_calls: int = MAX_CALLS_PER_GRAPH
) -> int:
    """Calls captured in one graph so that a replay takes about `target_replay_s`."""
    if call_s <= 0:
        return max_calls
    return max(1, min(max_calls, round(target_replay_s / call_s)))


def plan_replays(replay_s: float, window_s: float, min_replays: int = 10) -> int:
    """Replays that fill the hot window; at least `min_replays` samples for the median."""
    if replay_s <= 0:
        return min_replays
    return max(min_replays, math.ceil(window_s / replay_s))


def plan_cold_samples(
    call_s: float, flush_s: float, target_s: float, min_n: int, max_n: int
) -> int:
    """Cold samples within the time budget, never fewer than `min_n` (a p99 needs ~300)."""
    per_sample = max(call_s + flush_s, 1e-6)
    return max(min_n, min(max_n, int(target_s / per_sample)))


@dataclass
class HotWindow:
    per_call_ms: list[float]  # one sample per replay
    calls: int
    elapsed_ms: float  # GPU time from the first replay's start to the last one's end
    busy_start: float  # host perf_counter when the first replay was enqueued
    busy_end: float  # host perf_counter when the device finished the last replay
    calls_per_replay: int
    mode: str  # "graph" or "stream" (graph capture failed: launches back to back)

    @property
    def mean_call_ms(self) -> float:
        return self.elapsed_ms / self.calls


def _torch() -> Any:
    import torch

    return torch


def estimate_call_seconds(launch: Launch, repeats: int = 5) -> float:
    """Median of a few event-timed calls after one untimed call."""
    torch = _torch()
    launch()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    return sorted(times)[len(times) // 2]


class _StreamReplay:
    """Stand-in for a graph when capture is impossible: the same calls, launched eagerly."""

    def __init__(self, launch: Launch, calls: int) -> None:
        self._launch, self._calls = launch, calls

    def replay(self) -> None:
        for _ in range(self._calls):
            self._launch()


def capture(launch: Launch, calls: int) -> tuple[Any, str]:
    """A CUDA graph of `calls` launches, or an eager stand-in if capture fails."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()  # warm the launcher on a side stream, as graph capture wants
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    try:
        # capture_begin/end on the side stream rather than torch.cuda.graph(), which first
        # empties the allocator's cache: the next allocations then go back to the driver,
        # and on an H200 that emptying alone took 0.18 s of a 0.5 s screening measurement
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            graph.capture_begin()
            try:
                for _ in range(calls):
                    launch()
            finally:
                graph.capture_end()
        graph.replay()
        torch.cuda.synchronize()
        return graph, "graph"
    except Exception:
        torch.cuda.synchronize()
        return _StreamReplay(launch, calls), "stream"


def hot_window(
    launch: Launch, window_s: float, warmup_s: float, call_s: float | None = None
) -> HotWindow:
    """Replay a graph of back-to-back calls for about `window_s` after `warmup_s` of the same."""
    torch = _torch()
    call_s = call_s if call_s is not None else estimate_call_seconds(launch)
    calls = plan_calls_per_graph(call_s)
    graph, mode = capture(launch, calls)
    replay_s = call_s * calls
    warm_replays = max(1, math.ceil(warmup_s / max(replay_s, 1e-6)))
    warm_start = torch.cuda.Event(enable_timing=True)
    warm_end = torch.cuda.Event(enable_timing=True)
    warm_start.record()
    for _ in range(warm_replays):
        graph.replay()
    warm_end.record()
    torch.cuda.synchronize()
    # Plan the window from the replays' own time: a short call's single-call estimate
    # includes launch latency, and a window cut short has no whole-second energy span.
    measured_s = warm_start.elapsed_time(warm_end) / 1000.0 / warm_replays
    replays = plan_replays(measured_s if measured_s > 0 else replay_s, window_s)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
    busy_start = time.perf_counter()
    events[0].record()
    for i in range(replays):
        graph.replay()
        events[i + 1].record()
    events[-1].synchronize()
    busy_end = time.perf_counter()
    per_replay = [events[i].elapsed_time(events[i + 1]) for i in range(replays)]
    return HotWindow(
        per_call_ms=[ms / calls for ms in per_replay],
        calls=calls * replays,
        elapsed_ms=events[0].elapsed_time(events[-1]),
        busy_start=busy_start,
        busy_end=busy_end,
        calls_per_replay=calls,
        mode=mode,
    )


class L2Flusher:
    """Evicts the L2 by writing a buffer several times its size."""

    def __init__(self, nbytes: int = FLUSH_BYTES) -> None:
        torch = _torch()
        self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        self.flush()
        start.record()
        self.flush()
        end.record()
        end.synchronize()
        self.seconds = start.elapsed_time(end) / 1000.0

    def flush(self) -> None:
        self.buffer.zero_()


def cold_latencies(
    launches: Sequence[Launch], samples: int, flusher: L2Flusher
) -> list[list[float]]:
    """`samples` cold latencies (ms) of each launch, interleaved round-robin across launches
    so that drift in clocks or temperature falls on all of them alike."""
    torch = _torch()
    pairs: list[list[tuple[Any, Any]]] = [[] for _ in launches]
    for _ in range(samples):
        for index, launch in enumerate(launches):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            flusher.flush()
            start.record()
            launch()
            end.record()
            pairs[index].append((start, end))
    torch.cuda.synchronize()
    return [[s.elapsed_time(e) for s, e in shape_pairs] for shape_pairs in pairs]
