"""A simulated GPU under a power cap, and an NVML stand-in that reads it.

It stands in for the device where none is present: the energy estimators' tests and the
`--local` mode of bench/gpu/energy_reference.py run on it. The estimators see it only as
they see a GPU (counter readings, replay times); its steady state follows from the model
itself, so it is a reference independent of them.

The model follows what the H200 showed (bench/results/gpu_energy_reference.md):

- the card *would* draw `idle_w` when idle and, once a load starts at t = 0, the `ramp`
  pieces (seconds, watts) and then `busy_w`;
- a power controller holds the mean power over the trailing `averaging_s` at or under
  `cap_w`: at each step it grants the demand or, if less, what keeps that mean at the cap.
  After an idle gap the trailing mean has room, so the card runs above the cap until the
  mean reaches it; from then on each step must give back what left the window, and the
  power repeats, with the period `averaging_s`, the second that ended when it first
  saturated (idle, ramp, busy): a dip once a second. Every window of `averaging_s` after
  that point averages exactly `cap_w`, so the steady power is known exactly, and a window
  of another length over-weights the part of the cycle it covers beyond whole periods;
- speed follows power: calls per second `busy_rate * ((P - static_w) / (busy_w -
  static_w)) ** (1/3)` (dynamic power grows as the cube of the clock; no calls below
  `static_w`), so calls in the dip are slower and cost less energy;
- NVML's energy counter is the integral of power, published every `tick_s` (the first at
  `tick_phase_s`), each value the energy up to `lag_s` before its publication; its power
  reading is the mean over the trailing `averaging_s` at the last publication (NVML's 1 s
  average on Hopper).

In closed form with no ramp (the card jumps from idle to busy, idle below static power):
the controller first saturates at t* = (cap - idle) / (busy - idle) of a period, a period
then holds t* of busy calls, and the steady energy per call is cap / (t* * busy_rate).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

IDLE_BEFORE_S = 2.0  # the trace starts idle this long before the load


@dataclass(frozen=True)
class PowerCappedGpu:
    busy_w: float = 730.0
    busy_rate: float = 4000.0  # calls per second at busy_w
    cap_w: float = 700.0
    idle_w: float = 90.0
    static_w: float = 250.0  # power at which the clock would reach zero
    averaging_s: float = 1.0
    ramp: tuple[tuple[float, float], ...] = ((0.05, 500.0),)  # after an idle gap, before busy_w
    tick_s: float = 0.1
    tick_phase_s: float = 0.037
    lag_s: float = 0.0
    dt: float = 0.0005

    @property
    def capped(self) -> bool:
        return self.busy_w > self.cap_w

    def rate(self, power_w: Any) -> Any:
        share = (np.asarray(power_w, dtype=float) - self.static_w) / (self.busy_w - self.static_w)
        return self.busy_rate * np.cbrt(np.clip(share, 0.0, None))

    def demand_w(self, t: np.ndarray, load_end: float) -> np.ndarray:
        demand = np.where((t >= 0.0) & (t < load_end), self.busy_w, self.idle_w)
        start = 0.0
        for seconds, watts in self.ramp:
            demand = np.where((t >= start) & (t < min(start + seconds, load_end)), watts, demand)
            start += seconds
        return demand

    def trace(self, load_end: float) -> Trace:
        """Power from idle through the load (from t = 0 to `load_end`) and idle after it."""
        t = np.arange(-IDLE_BEFORE_S, load_end + 2.0, self.dt)
        demand = self.demand_w(t, load_end)
        window = round(self.averaging_s / self.dt)
        power = np.empty_like(demand)
        total = 0.0  # sum of the last window - 1 granted steps
        for n, wanted in enumerate(demand):
            granted = min(wanted, window * self.cap_w - total)
            power[n] = granted
            total += granted
            if n - window + 1 >= 0:
                total -= power[n - window + 1]
        return Trace(self, t, power)

    # -- the steady state --------------------------------------------------------------

    def steady_power_w(self) -> float:
        return self.cap_w if self.capped else self.busy_w

    def steady_energy_per_call_mj(self) -> float:
        """Below the cap: busy power over busy rate. At the cap: a whole period of the
        controller's cycle, taken from the model's power (not from any counter)."""
        if not self.capped:
            return self.busy_w / self.busy_rate * 1000.0
        trace = self.trace(load_end=6.0 * self.averaging_s)
        window = round(self.averaging_s / self.dt)
        end = int(np.searchsorted(trace.t, 5.0 * self.averaging_s))
        power = trace.power[end - window : end]
        return float(power.sum() / self.rate(power).sum()) * 1000.0

    def closed_form_energy_per_call_mj(self) -> float:
        """cap / (t* busy_rate) for the card that jumps from idle to busy (no ramp)."""
        saturates = (self.cap_w - self.idle_w) / (self.busy_w - self.idle_w) * self.averaging_s
        return self.cap_w * self.averaging_s / (saturates * self.busy_rate) * 1000.0


class Trace:
    """Power on a fine grid; energy and calls are its running sums."""

    def __init__(self, gpu: PowerCappedGpu, t: np.ndarray, power: np.ndarray) -> None:
        self.gpu, self.t, self.power = gpu, t, power
        self._energy = np.concatenate([[0.0], np.cumsum(power) * gpu.dt])  # J at each step's start
        self._calls = np.concatenate([[0.0], np.cumsum(gpu.rate(power)) * gpu.dt])

    def _at(self, series: np.ndarray, when: float) -> float:
        """The running sum at `when`, linear within a step (power is constant there)."""
        position = min(max((when - self.t[0]) / self.gpu.dt, 0.0), len(series) - 1.0)
        index = min(int(position), len(series) - 2)
        return float(series[index] + (series[index + 1] - series[index]) * (position - index))

    def energy_j(self, when: float) -> float:
        return self._at(self._energy, when)

    def calls(self, when: float) -> float:
        return self._at(self._calls, when)

    def time_of_calls(self, calls: float) -> float:
        """When the count of calls since the trace began reaches `calls`."""
        index = int(np.searchsorted(self._calls, calls))
        if index >= len(self._calls):
            raise ValueError("the trace ends before that many calls")
        before, after = self._calls[index - 1], self._calls[index]
        return float(self.t[0] + (index - 1 + (calls - before) / (after - before)) * self.gpu.dt)

    def power_w(self, when: float) -> float:
        index = int((when - self.t[0]) / self.gpu.dt)
        return float(self.power[min(max(index, 0), len(self.power) - 1)])

    def _published(self, when: float) -> float:
        gpu = self.gpu
        return gpu.tick_phase_s + math.floor((when - gpu.tick_phase_s) / gpu.tick_s) * gpu.tick_s - gpu.lag_s

    def counter_mj(self, when: float) -> float:
        """What NVML's total-energy counter says at host time `when` (whole mJ)."""
        return math.floor(self.energy_j(self._published(when)) * 1000.0)

    def averaged_power_w(self, when: float) -> float:
        """NVML's power reading: the mean over the trailing `averaging_s` at the last publication."""
        end, span = self._published(when), self.gpu.averaging_s
        return (self.energy_j(end) - self.energy_j(end - span)) / span


@dataclass
class SimulatedRun:
    """What the harness sees of one hot window (or reference run) on the simulated device."""

    readings: list[Any]
    busy_start: float
    busy_end: float
    replay_ms: list[float]
    calls_per_replay: int
    trace: Trace

    @property
    def per_call_ms(self) -> list[float]:
        return [ms / self.calls_per_replay for ms in self.replay_ms]

    @property
    def mean_call_ms(self) -> float:
        return sum(self.replay_ms) / (len(self.replay_ms) * self.calls_per_replay)


def simulate_run(
    gpu: PowerCappedGpu,
    window_s: float,
    warmup_s: float = 0.15,
    replay_s: float = 0.01,
    poll_s: float = 0.0045,
) -> SimulatedRun:
    """A hot window as the harness runs it after an idle gap: the load starts at t = 0 (the
    call estimate, the capture, the warm-up), the busy interval at `warmup_s`; graph replays
    of `replay_s` at full clock, enough to fill `window_s` at that speed; the sampler polls
    the counter every `poll_s` throughout."""
    from workers.measure.nvml_sampler import Reading

    calls_per_replay = max(1, round(replay_s * gpu.busy_rate))
    replays = max(10, math.ceil(window_s / (calls_per_replay / gpu.busy_rate)))
    # the load outlasts the replays here; the calls up to the last replay's end do not
    # depend on what follows it, and the readings after it are never used
    trace = gpu.trace(load_end=warmup_s + 1.5 * window_s + 1.0)
    busy_start = warmup_s
    first = trace.calls(busy_start)
    ends = [trace.time_of_calls(first + (i + 1) * calls_per_replay) for i in range(replays)]
    busy_end = ends[-1]
    replay_ms = [(b - a) * 1000.0 for a, b in zip([busy_start, *ends], ends, strict=False)]
    readings = []
    t = busy_start - 0.5
    while t < busy_end + 0.2:
        readings.append(Reading(t=t, energy_mj=float(trace.counter_mj(t)), power_w=trace.averaged_power_w(t)))
        t += poll_s
    return SimulatedRun(readings, busy_start, busy_end, replay_ms, calls_per_replay, trace)


class SimulatedNvml:
    """The few pynvml functions `NvmlSampler` calls, answering from a simulated trace on a
    virtual clock that advances by `poll_s` at each energy read (one NVML call's time)."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_SUCCESS = 0

    def __init__(self, trace: Trace, start: float, poll_s: float = 0.0045) -> None:
        self.trace, self.now, self.poll_s = trace, start, poll_s
        self._lock = threading.Lock()

    def clock(self) -> float:
        with self._lock:
            return self.now

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:  # noqa: N802 (pynvml's name)
        with self._lock:
            self.now += self.poll_s
            return int(self.trace.counter_mj(self.now))

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:  # noqa: N802
        return round(self.trace.averaged_power_w(self.clock()) * 1000.0)

    def nvmlDeviceGetClockInfo(self, handle: object, which: int) -> int:  # noqa: N802
        gpu = self.trace.gpu
        return round(1500 * float(gpu.rate(self.trace.power_w(self.clock()))) / gpu.busy_rate)

    def nvmlDeviceGetTemperature(self, handle: object, which: int) -> int:  # noqa: N802
        return 50

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:  # noqa: N802
        return 0x4 if self.trace.gpu.capped else 0x0
