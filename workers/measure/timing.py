"""Host-side timers for kernels called from Python: hot (back to back) and cold (caches
flushed before each call) per-call time, and energy windows over RAPL.

Hot time is what a busy server sees (inputs stay in cache); cold latency is the one-off cost
of a call after other work has evicted its data. They rank configurations differently, so a
study names the one it optimises (runtime_ms = hot, latency_ms and p99_ms = cold).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from wire.contract import MeasureSettings
from workers.measure.rapl import EnergyMeter

MIN_BATCH_S = 100e-6  # time a batch of calls at least this long, so timer overhead vanishes
ENERGY_CHUNK_S = 0.1  # RAPL updates about every millisecond; 100 ms windows are accurate
_FLUSH_MIN, _FLUSH_MAX = 8 << 20, 64 << 20


def warm_up(call: Callable[[], None], warmup_s: float) -> float:
    """Call until `warmup_s` has passed (at least 3 calls); return the median call time."""
    times: list[float] = []
    end = time.perf_counter() + warmup_s
    while len(times) < 3 or time.perf_counter() < end:
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e9)
    return max(sorted(times)[len(times) // 2], 1e-9)


def repetitions(budget_s: float, cost_s: float, settings: MeasureSettings) -> int:
    wanted = int(budget_s / max(cost_s, 1e-9))
    return max(settings.min_repeats, min(settings.max_repeats, wanted))


def hot_samples(call: Callable[[], None], per_call_s: float, settings: MeasureSettings) -> list[float]:
    """Seconds per call, each sample the mean over a back-to-back batch."""
    batch = max(1, math.ceil(MIN_BATCH_S / per_call_s))
    reps = repetitions(settings.target_s, per_call_s * batch, settings)
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        for _ in range(batch):
            call()
        samples.append((time.perf_counter_ns() - start) / 1e9 / batch)
    return samples


def flush_size() -> int:
    """Bytes to write between cold calls: twice the last-level cache, within 8..64 MiB (on
    machines with a huge shared L3 this evicts the private caches, not all of the L3)."""
    caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"))
    largest = 0
    for size_file in caches:
        text = size_file.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * scale)
    return max(_FLUSH_MIN, min(_FLUSH_MAX, 2 * largest))


class CacheFlusher:
    def __init__(self, nbytes: int | None = None) -> None:
        self.buffer = np.zeros((nbytes or flush_size()) // 8, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def flush(self) -> None:
        self.buffer += 1.0


def cold_samples(
    call: Callable[[], None], flusher: CacheFlusher, per_call_s: float, settings: MeasureSettings
) -> list[float]:
    """Seconds of single calls, each after the caches were flushed: as many as target_s allows
    within the repeat limits, and no more than settings.cold_samples (a screening stage)."""
    start = time.perf_counter()
    flusher.flush()
    flush_s = time.perf_counter() - start
    reps = repetitions(settings.target_s, per_call_s + flush_s, settings)
    reps = min(reps, settings.cold_samples or reps)
    samples = []
    for _ in range(reps):
        flusher.flush()
        begin = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - begin) / 1e9)
    return samples


def energy_windows(
    call: Callable[[], None], meter: EnergyMeter, per_call_s: float, settings: MeasureSettings
) -> tuple[list[float], list[float]]:
    """(joules per call, watts) of back-to-back windows of ENERGY_CHUNK_S covering
    settings.hot_window_s."""
    calls_per_chunk = max(1, math.ceil(ENERGY_CHUNK_S / per_call_s))
    chunks = max(2, math.ceil(settings.hot_window_s / ENERGY_CHUNK_S))
    joules, watts = [], []
    for _ in range(chunks):
        t0, e0 = meter.read()
        for _ in range(calls_per_chunk):
            call()
        t1, e1 = meter.read()
        spent = meter.joules_between(e0, e1)
        joules.append(spent / calls_per_chunk)
        watts.append(spent / max(t1 - t0, 1e-9))
    return joules, watts
