"""One measurement of a compiled GPU kernel over its workload: the harness both GPU backends use.

For every shape of the workload: a hot window (CUDA-graph replay for `hot_window_s`) while a
sampler thread reads NVML's energy counter, clocks, temperature and throttle reasons; then
cold latencies of all shapes, interleaved. The samples become objectives in
`gpu_aggregate.workload_metrics`; the environment of each sample set is returned beside them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from workers.contract import MeasureSettings, Metric
from workers.measure.gpu_aggregate import (
    COLD_OBJECTIVES,
    GPU_OBJECTIVES,
    HOT_OBJECTIVES,
    ShapeSamples,
    workload_metrics,
)
from workers.measure.gpu_energy import (
    NvmlSampler,
    calls_between,
    energy_window,
    environment_summary,
    nvml_handle_for_torch_device,
    readings_between,
    ticks_from_readings,
)
from workers.measure.gpu_timing import (
    L2Flusher,
    Launch,
    cold_latencies,
    estimate_call_seconds,
    hot_window,
    plan_cold_samples,
)

P99_MIN_SAMPLES = 300  # with fewer, no order statistic bounds the 99th percentile at 95%
MIN_WARMUP_S = 0.1  # clocks and power settle within this after an idle gap


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
    metrics = workload_metrics(samples, objectives, settings.confidence)
    return metrics, environment


def _hot(
    shape: ShapeLaunch,
    sample: ShapeSamples,
    call_s: float,
    settings: MeasureSettings,
    sampler: NvmlSampler | None,
) -> dict[str, Any]:
    window = hot_window(
        shape.launch, settings.hot_window_s, max(settings.warmup_s, MIN_WARMUP_S), call_s
    )
    sample.hot_ms = window.per_call_ms
    sample.hot_mean_ms = window.mean_call_ms
    info: dict[str, Any] = {
        "mode": window.mode,
        "calls": window.calls,
        "calls_per_replay": window.calls_per_replay,
        "window_s": window.busy_end - window.busy_start,
    }
    if sampler is not None:
        readings = sampler.readings()
        sample.energy = energy_window(
            ticks_from_readings(readings), window.busy_start, window.busy_end
        )
        if sample.energy is not None:
            sample.energy_calls = calls_between(
                window.busy_start,
                [ms * window.calls_per_replay for ms in window.per_call_ms],
                window.calls_per_replay,
                sample.energy.t_first,
                sample.energy.t_last,
            )
        info.update(
            environment_summary(readings_between(readings, window.busy_start, window.busy_end))
        )
        if sample.energy is None:
            info["energy_error"] = "fewer than two counter ticks inside the hot window"
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
