"""Energy per call from NVML's total-energy counter, read by a thread beside the hot window.

The counter (mJ since the driver loaded) advances in steps about 100 ms apart, and one NVML
call takes milliseconds, so energy cannot be read around a single kernel call. Instead a
sampler thread polls the counter while the measuring thread keeps the GPU busy with calls
back to back. A *tick* is a reading where the counter moved; its time is the midpoint
between that reading and the one before it (the change happened somewhere in between).
Ticks outside the busy interval are never used, so idle time before or after the window is
not charged to the kernel; the energy of a span between two ticks is divided by the calls
that ran in it, counted from the replays' GPU times.

Which ticks: at the power cap the card does not draw a steady power. Its controller holds
the mean power over a trailing second (`POWER_AVERAGING_S`) at the limit, so after an idle
gap it runs above the limit until that mean catches up, then dips, and from then on repeats
the pattern once a second (on the H200 a GEMM drew ~730 W for 0.8 s, then ~570 W with its
calls 15% slower for 0.2 s; bench/results/gpu_energy_reference.md). A span that is not a
whole number of those seconds over-weights one part of the cycle: the 1.6 s hot window's
first-to-last-tick span read 703 W where the steady state is 691-695 W. So the window is
made of spans of a whole number of seconds between ticks (one for every first tick that has
a partner at that distance, overlapping, so that every phase of the cycle is taken alike);
where the busy interval is too short for one, the first-to-last span is used and the
window says so (`periods` 0).

Everything above the `NvmlSampler` class is pure and tested on the CPU.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

POWER_AVERAGING_S = 1.0  # the power controller's averaging period (NVML's power reading on Hopper too)
PERIOD_TOLERANCE_S = 0.04  # how far a span may miss a whole number of periods (ticks are ~0.1 s apart)

# NVML clock-event ("throttle") reason bits, from nvml.h.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_throttle_reasons(mask: int) -> list[str]:
    """Names of the reasons set in an NVML clock-event bit mask; unknown bits by value."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


@dataclass(frozen=True)
class Reading:
    """One poll of the sampler: host time (perf_counter seconds) and what NVML said."""

    t: float
    energy_mj: float
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None  # nvmlDeviceGetPowerUsage: a 1 s mean on Hopper and later
    throttle_mask: int | None = None
    power_instant_w: float | None = None  # NVML_FI_DEV_POWER_INSTANT, where the driver has it


@dataclass(frozen=True)
class Tick:
    t: float  # estimated host time at which the counter advanced
    energy_mj: float


@dataclass(frozen=True)
class EnergyWindow:
    """Counter differences over spans between ticks inside a busy interval, summed.

    `spans` are the (first tick, last tick) host-time pairs whose energies make up
    `energy_mj` and whose lengths make up `seconds`; `periods` is how many controller periods
    each spans (0: the first-to-last-tick span, not period-aligned)."""

    energy_mj: float
    seconds: float
    t_first: float
    t_last: float
    ticks: int
    interval_power_w: list[float] = field(default_factory=list)  # between consecutive ticks
    spans: tuple[tuple[float, float], ...] = ()
    periods: int = 0

    @property
    def power_w(self) -> float:
        return self.energy_mj / self.seconds / 1000.0

    def span_list(self) -> tuple[tuple[float, float], ...]:
        return self.spans or ((self.t_first, self.t_last),)


def ticks_from_readings(readings: Sequence[Reading]) -> list[Tick]:
    """The readings at which the counter moved, timed at the midpoint since the last poll."""
    ticks: list[Tick] = []
    for before, after in zip(readings, readings[1:], strict=False):
        if after.energy_mj != before.energy_mj:
            ticks.append(Tick(t=(before.t + after.t) / 2.0, energy_mj=after.energy_mj))
    return ticks


def _inside(ticks: Sequence[Tick], start: float, end: float) -> list[Tick]:
    return [tick for tick in ticks if start < tick.t < end]


def _interval_powers(inside: Sequence[Tick]) -> list[float]:
    return [
        (b.energy_mj - a.energy_mj) / (b.t - a.t) / 1000.0
        for a, b in zip(inside, inside[1:], strict=False)
        if b.t > a.t
    ]


def edge_window(ticks: Sequence[Tick], busy_start: float, busy_end: float) -> EnergyWindow | None:
    """Energy between the first and last tick strictly inside [busy_start, busy_end].

    Returns None when fewer than two ticks fall inside: the window was too short for the
    counter's update period, and no honest number can be given. Under the power cap this
    span is biased by the part of the controller's cycle it covers beyond whole periods.
    """
    inside = _inside(ticks, busy_start, busy_end)
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    seconds = last.t - first.t
    if seconds <= 0:
        return None
    return EnergyWindow(
        energy_mj=last.energy_mj - first.energy_mj,
        seconds=seconds,
        t_first=first.t,
        t_last=last.t,
        ticks=len(inside),
        interval_power_w=_interval_powers(inside),
        spans=((first.t, last.t),),
    )


def period_spans(
    inside: Sequence[Tick], period_s: float, tolerance_s: float
) -> tuple[int, list[tuple[Tick, Tick]]]:
    """Spans of k whole periods between the ticks (within the tolerance): for each tick, its
    partner closest to k periods on. Of the k that fit, the one whose spans cover the most
    time (k times their number): k = 1 in a hot window under 2 s, about half the run in a
    long one. (0, []) when no span of a whole period fits."""
    times = [tick.t for tick in inside]
    if len(times) < 2:
        return 0, []
    best: tuple[int, list[tuple[Tick, Tick]]] = (0, [])
    for k in range(1, int((times[-1] - times[0] + tolerance_s) // period_s) + 1):
        pairs: list[tuple[Tick, Tick]] = []
        for i, first in enumerate(inside):
            target = first.t + k * period_s
            j = bisect.bisect_left(times, target, lo=i + 1)
            near = [inside[c] for c in (j - 1, j) if i < c < len(inside)]
            partner = min(near, key=lambda tick: abs(tick.t - target), default=None)
            if partner is not None and abs(partner.t - target) <= tolerance_s:
                pairs.append((first, partner))
        if k * len(pairs) > best[0] * len(best[1]):
            best = (k, pairs)
    return best


def energy_window(
    ticks: Sequence[Tick],
    busy_start: float,
    busy_end: float,
    period_s: float = POWER_AVERAGING_S,
    tolerance_s: float = PERIOD_TOLERANCE_S,
) -> EnergyWindow | None:
    """Energy over spans of a whole number of controller periods inside the busy interval.

    Every tick with a partner k whole periods on starts one span (`period_spans` chooses k);
    their energies and lengths are summed, so each phase of the controller's cycle counts
    alike. With no such span (a busy interval shorter than a period), the first to
    last tick (`edge_window`, `periods` 0); with fewer than two ticks inside, None.
    """
    inside = _inside(ticks, busy_start, busy_end)
    periods, pairs = period_spans(inside, period_s, tolerance_s)
    if not pairs:
        return edge_window(ticks, busy_start, busy_end)
    return EnergyWindow(
        energy_mj=sum(b.energy_mj - a.energy_mj for a, b in pairs),
        seconds=sum(b.t - a.t for a, b in pairs),
        t_first=pairs[0][0].t,
        t_last=pairs[-1][1].t,
        ticks=len(inside),
        interval_power_w=_interval_powers(inside),
        spans=tuple((a.t, b.t) for a, b in pairs),
        periods=periods,
    )


REFERENCE_SKIP_S = 2.0  # a steady-state reference leaves out the first seconds after the idle gap
REFERENCE_TAIL_S = 0.5  # and the last half second


def steady_state_window(
    ticks: Sequence[Tick],
    busy_start: float,
    busy_end: float,
    skip_s: float = REFERENCE_SKIP_S,
    tail_s: float = REFERENCE_TAIL_S,
) -> tuple[EnergyWindow | None, EnergyWindow | None]:
    """A long run's reference: (whole-period spans, first-to-last span) of the ticks well
    inside it, `skip_s` after its start and `tail_s` before its end. Over ~18 s the two
    differ by at most one partial controller period over the span (a few tenths of a
    percent at the cap); both are reported so that the difference shows."""
    start, end = busy_start + skip_s, busy_end - tail_s
    return energy_window(ticks, start, end), edge_window(ticks, start, end)


def calls_between(
    busy_start: float, replay_ms: Sequence[float], calls_per_replay: int, t0: float, t1: float
) -> float:
    """How many calls ran between host times t0 and t1, from the replays' GPU durations.

    Replays run back to back from `busy_start` (the device was idle when the first was
    enqueued), so replay i ends `sum(replay_ms[:i + 1])` after it; a replay that straddles t0
    or t1 counts for the part of it inside, its calls taken as evenly spread."""
    calls = 0.0
    start = busy_start
    for ms in replay_ms:
        end = start + ms / 1000.0
        if end > start:
            overlap = min(end, t1) - max(start, t0)
            if overlap > 0:
                calls += calls_per_replay * overlap / (end - start)
        start = end
    return calls


def window_calls(
    window: EnergyWindow, busy_start: float, replay_ms: Sequence[float], calls_per_replay: int
) -> float:
    """Calls that ran in the window's spans (a call in two overlapping spans counts twice,
    as its energy does)."""
    return sum(
        calls_between(busy_start, replay_ms, calls_per_replay, t0, t1) for t0, t1 in window.span_list()
    )


def energy_per_call_mj(window: EnergyWindow, seconds_per_call: float) -> float:
    """Window energy over the calls that ran between its ticks, at the mean call time of
    the whole hot run (when the calls between the ticks were not counted)."""
    if seconds_per_call <= 0:
        raise ValueError("seconds_per_call must be positive")
    calls = window.seconds / seconds_per_call
    return window.energy_mj / calls


def readings_between(readings: Sequence[Reading], start: float, end: float) -> list[Reading]:
    return [r for r in readings if start <= r.t <= end]


def environment_summary(readings: Sequence[Reading]) -> dict[str, Any]:
    """SM clock, temperature, power and throttle reasons seen during a sample set."""
    clocks = sorted(r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None)
    temps = [r.temperature_c for r in readings if r.temperature_c is not None]
    powers = [r.power_w for r in readings if r.power_w is not None]
    instants = [r.power_instant_w for r in readings if r.power_instant_w is not None]
    mask = 0
    for reading in readings:
        if reading.throttle_mask is not None:
            mask |= reading.throttle_mask
    summary: dict[str, Any] = {"readings": len(readings)}
    if clocks:
        summary["sm_clock_mhz"] = {
            "min": clocks[0],
            "median": clocks[len(clocks) // 2],
            "max": clocks[-1],
        }
    if temps:
        summary["temperature_c"] = {"start": temps[0], "end": temps[-1], "max": max(temps)}
    if powers:
        summary["power_w_instant"] = {"min": min(powers), "max": max(powers)}  # the reading's name
        summary["power_w_nvml_end"] = powers[-1]  # a 1 s mean on Hopper: the window's last second
    if instants:
        summary["power_w_field_instant"] = {"min": min(instants), "max": max(instants)}
    summary["throttle_reasons"] = decode_throttle_reasons(mask)
    return summary


class NvmlSampler:
    """Polls the energy counter (every loop) and clocks/temperature (every `detail_s`).

    Runs in a daemon thread so that the measuring thread never waits on NVML; NVML calls
    release the GIL inside ctypes, and the measuring thread spends the window blocked in a
    device synchronize.
    """

    def __init__(
        self,
        device_handle: Any,
        detail_s: float = 0.02,
        nvml: Any | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if nvml is None:  # a stand-in (a simulated device) may be given instead
            import pynvml

            nvml = pynvml
        self._nvml: Any = nvml
        self._clock = clock
        self._instant_field: int | None = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        self._handle = device_handle
        self._detail_s = detail_s
        self._readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def readings(self) -> list[Reading]:
        return list(self._readings)

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        last_detail = 0.0
        try:
            while not self._stop.is_set():
                energy = float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                now = self._clock()
                if now - last_detail >= self._detail_s:
                    last_detail = now
                    self._readings.append(Reading(t=now, energy_mj=energy, **self._details()))
                else:
                    self._readings.append(Reading(t=now, energy_mj=energy))
        except Exception as exc:  # recorded and reported with the measurement
            self.error = f"{type(exc).__name__}: {exc}"

    def _details(self) -> dict[str, Any]:
        nvml, handle = self._nvml, self._handle
        reasons = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        temperature = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        return {
            "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "temperature_c": float(temperature),
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "throttle_mask": int(reasons(handle)),
            "power_instant_w": self._instant_power_w(),
        }

    def _instant_power_w(self) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT in W, or None (and never asked again) where unanswered."""
        if self._instant_field is None:
            return None
        try:
            (value,) = self._nvml.nvmlDeviceGetFieldValues(self._handle, [self._instant_field])
            if value.nvmlReturn != 0:
                raise ValueError(f"NVML return {value.nvmlReturn}")
            return float(value.value.uiVal) / 1000.0
        except Exception:
            self._instant_field = None
            return None


def nvml_energy_readable() -> bool:
    """Whether NVML answers the total-energy counter for this process's first GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(0))
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return True
    except Exception:
        return False


def nvml_handle_for_torch_device(device_index: int = 0) -> Any:
    """The NVML handle of the GPU that torch calls `cuda:<device_index>`.

    CUDA and NVML number GPUs differently once CUDA_VISIBLE_DEVICES is set, so match by UUID.
    """
    import pynvml
    import torch

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(device_index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        for candidate in (text if text.startswith("GPU-") else f"GPU-{text}", text):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(candidate)
            except pynvml.NVMLError:
                continue
    return pynvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index))


def nvml_index(device_index: int) -> int:
    """NVML numbers every GPU; CUDA only the visible ones, in CUDA_VISIBLE_DEVICES order."""
    import os

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if device_index < len(visible) and visible[device_index].isdigit():
        return int(visible[device_index])
    return device_index
