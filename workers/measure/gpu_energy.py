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

Everything here is pure and tested on the CPU; workers.measure.nvml_sampler reads the counter.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from workers.measure.nvml_sampler import Reading

POWER_AVERAGING_S = 1.0  # the power controller's averaging period (NVML's power reading on Hopper too)
PERIOD_TOLERANCE_S = 0.04  # how far a span may miss a whole number of periods (ticks are ~0.1 s apart)

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
