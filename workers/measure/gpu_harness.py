"""One measurement of a compiled GPU kernel over its workload: the harness both GPU backends use.

For every shape of the workload: a hot window (CUDA-graph replay for `hot_window_s`) while a
sampler thread reads NVML's energy counter, clocks, temperature and throttle reasons; then
cold latencies of all shapes, interleaved. The samples become objectives in
`gpu_aggregate.workload_metrics`; the environment of each sample set is returned beside them.

`reference_workload` is the steady-state reference the trial's energy is checked against
(bench/gpu/energy_reference.py): every shape replayed back to back for many seconds, its
energy per call taken over ticks well inside the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from wire.contract import MeasureSettings, Metric
from workers.measure.gpu_aggregate import (
    COLD_OBJECTIVES,
    GPU_OBJECTIVES,
    HOT_OBJECTIVES,
    ShapeSamples,
    workload_metrics,
)
from workers.measure.gpu_energy import (
    edge_window,
    energy_window,
    steady_state_window,
    ticks_from_readings,
    window_calls,
)
from workers.measure.gpu_timing import (
    L2Flusher,
    Launch,
    cold_latencies,
    estimate_call_seconds,
    hot_window,
    plan_cold_samples,
)
from workers.measure.nvml_sampler import (
    NvmlSampler,
    Reading,
    environment_summary,
    nvml_handle_for_torch_device,
    readings_between,
)

P99_MIN_SAMPLES = 300  # with fewer, no order statistic bounds the 99th percentile at 95%
MIN_WARMUP_S = 0.1  # clocks and power settle within this after an idle gap...
BUSY_WARMUP_S = 0.02  # ...and need no longer (bench/gpu/warmup_floor.py) when this process's last measurement
IDLE_GAP_S = 1.0  # ended less than this ago (a warm runner measuring trial after trial)


class GpuActivity:
    """When this process last kept the GPU busy measuring, for the warm-up floor: a hot
    window's warm-up brings clocks and power to their steady state after an idle gap, which
    a GPU measured back to back is already in (bench/results/gpu_screening_compare.md,
    ninth series)."""

    def __init__(self) -> None:
        self.ended: float | None = None  # perf_counter() when the last measurement ended

    def floor(self, now: float | None = None) -> float:
        """The least warm-up before a hot window started `now`."""
        now = time.perf_counter() if now is None else now
        busy = self.ended is not None and 0 <= now - self.ended < IDLE_GAP_S
        return BUSY_WARMUP_S if busy else MIN_WARMUP_S

    def mark(self, now: float | None = None) -> None:
        self.ended = time.perf_counter() if now is None else now


ACTIVITY = GpuActivity()


@dataclass
class ShapeLaunch:
    key: str
    weight: float
    launch: Launch


def wanted_sample_sets(objectives: Sequence[str]) -> tuple[bool, bool]:
    """(hot, cold): which sample sets the objectives need; hot when none names either."""
    wanted = set(objectives)
    hot = bool(wanted & HOT_OBJECTIVES) or not (wanted & GPU_OBJECTIVES)
    return hot, bool(wanted & COLD_OBJECTIVES)


@contextlib.contextmanager
def _sampler(environment: dict[str, Any]) -> Iterator[NvmlSampler | None]:
    try:
        sampler = NvmlSampler(nvml_handle_for_torch_device())
    except Exception as exc:  # no NVML: times still count, energy is reported missing
        environment["energy_error"] = f"NVML unavailable: {exc}"
        yield None
        return
    with sampler:
        yield sampler
    if sampler.error:
        environment["energy_error"] = sampler.error


def measure_workload(
    shapes: Sequence[ShapeLaunch], objectives: Sequence[str], settings: MeasureSettings
) -> tuple[dict[str, Metric], dict[str, Any]]:
    hot, cold = wanted_sample_sets(objectives)
    environment: dict[str, Any] = {"device": device_description(), "shapes": {}}
    samples = [ShapeSamples(key=s.key, weight=s.weight) for s in shapes]
    call_seconds = [estimate_call_seconds(s.launch) for s in shapes]
    with _sampler(environment) as sampler:
        if hot:
            for shape, sample, call_s in zip(shapes, samples, call_seconds, strict=True):
                environment["shapes"][shape.key] = {
                    "hot": _hot(shape, sample, call_s, settings, sampler)
                }
        if cold:
            environment["cold"] = _cold(
                shapes, samples, call_seconds, objectives, settings, sampler
            )
        ACTIVITY.mark()
    metrics = workload_metrics(samples, objectives, settings.confidence)
    return metrics, environment


def _hot(
    shape: ShapeLaunch,
    sample: ShapeSamples,
    call_s: float,
    settings: MeasureSettings,
    sampler: NvmlSampler | None,
) -> dict[str, Any]:
    warmup_s = max(settings.warmup_s, ACTIVITY.floor())
    window = hot_window(shape.launch, settings.hot_window_s, warmup_s, call_s)
    ACTIVITY.mark()
    sample.hot_ms = window.per_call_ms
    sample.hot_mean_ms = window.mean_call_ms
    info: dict[str, Any] = {
        "mode": window.mode,
        "calls": window.calls,
        "calls_per_replay": window.calls_per_replay,
        "warmup_s": warmup_s,
        "window_s": window.busy_end - window.busy_start,
    }
    if sampler is not None:
        readings = sampler.readings()
        replay_ms = [ms * window.calls_per_replay for ms in window.per_call_ms]
        info["energy"] = hot_energy(
            sample, readings, window.busy_start, window.busy_end, replay_ms, window.calls_per_replay
        )
        info.update(
            environment_summary(readings_between(readings, window.busy_start, window.busy_end))
        )
        if sample.energy is None:
            info["energy_error"] = "fewer than two counter ticks inside the hot window"
    return info


def hot_energy(
    sample: ShapeSamples,
    readings: Sequence[Reading],
    busy_start: float,
    busy_end: float,
    replay_ms: Sequence[float],
    calls_per_replay: int,
) -> dict[str, Any]:
    """A hot window's energy and the calls it covers (whole controller periods between
    counter ticks, `gpu_energy.energy_window`), and the first-to-last-tick estimate beside it.

    `replay_ms` are the GPU times of the replays, run back to back from `busy_start`.
    Returns what the environment records of it (empty when no energy could be given)."""
    ticks = ticks_from_readings(readings)
    sample.energy = energy_window(ticks, busy_start, busy_end)
    if sample.energy is None:
        return {}
    sample.energy_calls = window_calls(sample.energy, busy_start, replay_ms, calls_per_replay)
    edge = edge_window(ticks, busy_start, busy_end)
    if edge is not None:
        calls = window_calls(edge, busy_start, replay_ms, calls_per_replay)
        if calls > 0:
            sample.edge_energy_mj, sample.edge_power_w = edge.energy_mj / calls, edge.power_w
    info: dict[str, Any] = {
        "periods": sample.energy.periods,
        "spans": len(sample.energy.span_list()),
        "seconds": sample.energy.seconds,
        "calls": sample.energy_calls,
        "power_w": sample.energy.power_w,
        "mj": sample.energy.energy_mj / sample.energy_calls if sample.energy_calls else None,
    }
    if sample.edge_energy_mj is not None:
        info.update(edge_mj=sample.edge_energy_mj, edge_power_w=sample.edge_power_w)
    return info


def _cold(
    shapes: Sequence[ShapeLaunch],
    samples: Sequence[ShapeSamples],
    call_seconds: Sequence[float],
    objectives: Sequence[str],
    settings: MeasureSettings,
    sampler: NvmlSampler | None,
) -> dict[str, Any]:
    import time

    flusher = L2Flusher()
    min_n = max(settings.min_repeats, P99_MIN_SAMPLES if "p99_ms" in objectives else 0)
    budget_s = settings.target_s / max(1, len(shapes))
    count = plan_cold_samples(
        max(call_seconds), flusher.seconds, budget_s, min_n, max(settings.max_repeats, min_n)
    )
    # a screening stage caps the count (below the p99 floor too): its wider intervals carry the doubt
    count = min(count, settings.cold_samples or count)
    start = time.perf_counter()
    latencies = cold_latencies([s.launch for s in shapes], count, flusher)
    end = time.perf_counter()
    for sample, values in zip(samples, latencies, strict=True):
        sample.cold_ms = values
    info: dict[str, Any] = {"samples_per_shape": count, "flush_ms": flusher.seconds * 1000.0}
    if sampler is not None:
        info.update(environment_summary(readings_between(sampler.readings(), start, end)))
    return info


def device_description() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    description: dict[str, Any] = {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        handle = nvml_handle_for_torch_device()
        description["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        description["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
    return description


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def reference_result(
    readings: Sequence[Reading],
    busy_start: float,
    busy_end: float,
    replay_ms: Sequence[float],
    calls_per_replay: int,
) -> dict[str, float] | None:
    """Energy per call and power of a long back-to-back run, over ticks well inside it
    (`gpu_energy.steady_state_window`), with the first-to-last-tick values beside them."""
    aligned, edge = steady_state_window(ticks_from_readings(readings), busy_start, busy_end)
    if aligned is None:
        return None
    calls = window_calls(aligned, busy_start, replay_ms, calls_per_replay)
    if calls <= 0:
        return None
    result = {
        "energy_mj": aligned.energy_mj / calls,
        "power_w": aligned.power_w,
        "seconds_per_call": aligned.seconds / calls,
        "span_s": aligned.t_last - aligned.t_first,
        "periods": float(aligned.periods),
        "ticks": float(aligned.ticks),
    }
    if edge is not None:
        edge_calls = window_calls(edge, busy_start, replay_ms, calls_per_replay)
        result.update(edge_energy_mj=edge.energy_mj / edge_calls, edge_power_w=edge.power_w)
    return result


def combine_references(results: Sequence[dict[str, float]], weights: Sequence[float]) -> dict[str, float]:
    """A workload's reference as its trial aggregates shapes: energy per call the weighted
    mean, power the weighted energy over the weighted time per call."""
    total = sum(weights)
    energy = sum(r["energy_mj"] * w for r, w in zip(results, weights, strict=True)) / total
    seconds = sum(r["seconds_per_call"] * w for r, w in zip(results, weights, strict=True)) / total
    return {"energy_mj": energy, "power_w": energy / seconds / 1000.0, "seconds_per_call": seconds}


def reference_workload(
    shapes: Sequence[ShapeLaunch], reference_s: float, warmup_s: float = MIN_WARMUP_S
) -> tuple[dict[str, float] | None, dict[str, Any]]:
    """Each shape replayed back to back for `reference_s` while NVML is sampled: the
    steady-state energy per call and power a trial's measurement should agree with."""
    environment: dict[str, Any] = {"device": device_description(), "shapes": {}}
    results: list[dict[str, float]] = []
    with _sampler(environment) as sampler:
        if sampler is None:
            return None, environment
        for shape in shapes:
            window = hot_window(shape.launch, reference_s, max(warmup_s, MIN_WARMUP_S))
            readings = sampler.readings()
            replay_ms = [ms * window.calls_per_replay for ms in window.per_call_ms]
            result = reference_result(
                readings, window.busy_start, window.busy_end, replay_ms, window.calls_per_replay
            )
            environment["shapes"][shape.key] = {
                "reference": result,
                "window_s": window.busy_end - window.busy_start,
                "runtime_ms": window.mean_call_ms,
                **environment_summary(readings_between(readings, window.busy_start, window.busy_end)),
            }
            if result is None:
                return None, environment
            results.append(result)
    return combine_references(results, [s.weight for s in shapes]), environment
