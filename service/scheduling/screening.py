"""Multi-fidelity measurement, with no I/O: a study may measure every trial first in a short
screening stage and measure fully only the trials whose screening result, with its
interval, could place them on or near the front of the fully measured trials.

Here: the screen's and the promotion rule's defaults and their checks (the document), and
the rule itself. A trial is promoted unless some member of the current front (fully
measured, and screened like every trial) beats it on every objective of the study:
- on a screened objective, by its screening interval with a margin: the member's worst
  plausible screening value, moved by the margin, is still better than the trial's best
  plausible one (minimise: `m.high + margin*|m.high| < t.low`);
- on energy_mj, which the default screen does not measure, through runtime: only when the
  trial's screened runtime is at least `energy_runtime_ratio` times the member's (their
  intervals' far ends), i.e. when no plausible power could make the slower trial use less
  energy per call (docs/measurement.md has the numbers behind the default);
- on any other objective the screen did not measure, never (such a trial is promoted; the
  document checks refuse a screen that would leave one).
The baseline is always promoted: ratios and the hypervolume are measured against its full
values. docs/measurement.md explains the margins from the noise measured on the H200.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.studies.document import ENERGY_OBJECTIVES as ENERGY_METRICS
from service.studies.document import KNOWN_OBJECTIVES, DocumentError, Promote, ResolvedObjective, Screen
from wire.contract import MeasureSettings
from wire.space import NAME_RE

# an energy figure needs two ticks of NVML's ~100 ms counter well inside the hot window
ENERGY_SCREEN_MIN_WINDOW_S = 0.5
# Per objective, how far apart two screening values must be (a fraction of the better one)
# before the screen calls the difference real. From the H200 (docs/measurement.md): a 0.2 s
# hot window's runtime ratio of two configurations came within 2.0% of their 1.6 s ratio in
# every pair of ten repeats, and GPUs of one host differ by ~1.2%; cold latency moved by up to
# 7.7% between rounds, the p99 of five baseline repeats by up to 15% with 300+ samples.
DEFAULT_MARGINS: dict[str, float] = {
    "runtime_ms": 0.04,
    "latency_ms": 0.08,
    "p99_ms": 0.20,
    "energy_mj": 0.05,
    "power_w": 0.05,
    "compile_s": 0.25,
}
DEFAULT_MARGIN = 0.05  # metrics of python kernels, whose noise the service cannot know
# A configuration this many times slower (screened runtime) than another uses more energy
# per call: across every recorded H200 configuration pair the largest runtime ratio at which
# the slower one used no more energy was 2.04 (docs/measurement.md).
ENERGY_RUNTIME_RATIO = 2.5


@dataclass(frozen=True)
class Interval:
    """A screening value with its confidence interval (low <= value <= high)."""

    low: float
    value: float
    high: float

    @classmethod
    def of(cls, metric: Mapping[str, Any]) -> Interval:
        """From a worker's metric (value, ci_low, ci_high); a missing bound is the value."""
        value = float(metric["value"])
        low, high = metric.get("ci_low"), metric.get("ci_high")
        low = float(low) if isinstance(low, int | float) and math.isfinite(low) else value
        high = float(high) if isinstance(high, int | float) and math.isfinite(high) else value
        return cls(min(low, value), value, max(high, value))


@dataclass(frozen=True)
class Member:
    """A member of the study's front: its full-stage values and its screening intervals."""

    number: int
    values: Mapping[str, float]
    screen: Mapping[str, Interval]


@dataclass(frozen=True)
class Rule:
    margins: Mapping[str, float]
    energy_runtime_ratio: float = ENERGY_RUNTIME_RATIO

    @classmethod
    def of(cls, promote: Promote) -> Rule:
        """A study's resolved rule (its document's measure.promote)."""
        assert promote.energy_runtime_ratio is not None, "a resolved rule has its ratio"
        return cls(dict(promote.margins), promote.energy_runtime_ratio)

    def margin(self, name: str) -> float:
        return float(self.margins.get(name, DEFAULT_MARGINS.get(name, DEFAULT_MARGIN)))


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    by: int | None = None  # the front member that screened the trial out
    told: dict[str, float] | None = None  # what the sampler hears of a screened-out trial


def beats(objective: ResolvedObjective, member: Member, screen: Mapping[str, Interval], rule: Rule) -> bool:
    """Whether `member` is better than the screened trial on this objective beyond doubt."""
    name, direction = objective.name, objective.direction
    mine, theirs = member.screen.get(name), screen.get(name)
    if mine is not None and theirs is not None:
        margin = rule.margin(name)
        if direction == "minimize":
            return mine.high + margin * abs(mine.high) < theirs.low
        return mine.low - margin * abs(mine.low) > theirs.high
    if bounded_by_runtime(name, direction):
        mine, theirs = member.screen.get("runtime_ms"), screen.get("runtime_ms")
        if mine is None or theirs is None or mine.high <= 0:
            return False
        return theirs.low > rule.energy_runtime_ratio * mine.high
    return False


def bounded_by_runtime(name: str, direction: str) -> bool:
    """An objective the screen may leave out because runtime bounds it: energy per call is
    power times time, and a slow enough configuration cannot make up for its time."""
    return name == "energy_mj" and direction == "minimize"


def decide(objectives: Sequence[ResolvedObjective], screen: Mapping[str, Interval], front: Sequence[Member],
           rule: Rule, *, baseline: bool = False) -> Decision:
    """Promote the screened trial, or screen it out naming the front member that beats it on
    every objective (the first by trial number)."""
    if baseline:
        return Decision(True, "the baseline is always measured fully")
    for member in sorted(front, key=lambda m: m.number):
        if all(beats(o, member, screen, rule) for o in objectives):
            return Decision(False, f"trial {member.number} of the front beats it on every objective",
                            by=member.number, told=told_values(objectives, screen, member))
    if not front:
        return Decision(True, "no fully measured trial to compare with yet")
    return Decision(True, "it could place on or near the front")


def told_values(objectives: Sequence[ResolvedObjective], screen: Mapping[str, Interval],
                member: Member) -> dict[str, float]:
    """The objective values the sampler hears of a trial screened out by `member`: its
    screening values, and energy it did not measure as if it drew the member's power (its
    runtime is at least energy_runtime_ratio times the member's, so the values stay
    dominated by the member's, as the decision found)."""
    told: dict[str, float] = {}
    for objective in objectives:
        name = objective.name
        if name in screen:
            told[name] = screen[name].value
        else:  # bounded_by_runtime: beats() would not have let it through otherwise
            told[name] = float(member.values[name]) * screen["runtime_ms"].value / member.screen["runtime_ms"].value
    return told


# --- the document ---------------------------------------------------------------------------


def resolve(objectives: list[ResolvedObjective], backend: str, screen: Screen, promote: Promote | None,
            full: MeasureSettings) -> tuple[Screen, Promote]:
    """The normalised `measure.screen` and `measure.promote` of a document, or a
    DocumentError naming the field and the fix. A screen is never longer than the full
    measurement (`full`, the normalised full settings): its windows are capped by those."""
    screened = _screened(objectives, backend, screen)
    for o in objectives:
        if o.name not in screened and not (bounded_by_runtime(o.name, o.direction) and "runtime_ms" in screened):
            raise DocumentError(
                "measure.screen.objectives",
                f"objective {o.name!r} is not screened and nothing the screen measures bounds it, so every trial "
                f"would be promoted: add {o.name!r} to measure.screen.objectives"
                + (f" (with hot_window_s >= {ENERGY_SCREEN_MIN_WINDOW_S})" if o.name in ENERGY_METRICS else "")
                + ", or measure without a screen",
            )
    rule = promote or Promote()
    for name in rule.margins:
        if name not in screened:
            raise DocumentError(f"measure.promote.margins.{name}",
                                f"{name!r} is not screened; margins apply to {', '.join(screened)}")
    resolved_screen = screen.model_copy(update={
        "objectives": screened, "hot_window_s": min(screen.hot_window_s, full.hot_window_s),
        "target_s": min(screen.target_s, full.target_s), "warmup_s": min(screen.warmup_s, full.warmup_s)})
    margins = {name: rule.margins.get(name, DEFAULT_MARGINS.get(name, DEFAULT_MARGIN)) for name in screened}
    ratio = rule.energy_runtime_ratio if rule.energy_runtime_ratio is not None else ENERGY_RUNTIME_RATIO
    return resolved_screen, Promote(margins=margins, energy_runtime_ratio=ratio)


def _screened(objectives: list[ResolvedObjective], backend: str, screen: Screen) -> list[str]:
    """The metrics the screen measures: those the document names, else every objective but
    energy and power (which need a long hot window), with runtime_ms when energy_mj is an
    objective (it bounds energy)."""
    if screen.objectives is None:
        names = [o.name for o in objectives if o.name not in ENERGY_METRICS]
        if any(o.name == "energy_mj" for o in objectives) and "runtime_ms" not in names:
            names.append("runtime_ms")
        return names
    if not screen.objectives:
        raise DocumentError("measure.screen.objectives", "a screen measures at least one metric; name one or leave "
                                                         "objectives out for the default")
    for i, name in enumerate(screen.objectives):
        if name not in KNOWN_OBJECTIVES and (backend != "python" or not NAME_RE.match(name)):
            raise DocumentError(f"measure.screen.objectives.{i}",
                                f"unknown metric {name!r}; use one of {', '.join(KNOWN_OBJECTIVES)}")
        if screen.objectives.index(name) != i:
            raise DocumentError(f"measure.screen.objectives.{i}", f"{name!r} is listed twice")
        gpu = backend in ("triton", "cuda")
        if name in ENERGY_METRICS and gpu and screen.hot_window_s < ENERGY_SCREEN_MIN_WINDOW_S:
            raise DocumentError(
                "measure.screen.hot_window_s",
                f"screening {name} needs a hot window of at least {ENERGY_SCREEN_MIN_WINDOW_S} s (NVML's energy "
                f"counter advances every ~100 ms); set hot_window_s or leave {name} to the full stage",
            )
    return list(screen.objectives)


def screen_measure(measure: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A normalised `measure` as the wire's MeasureSettings of the full stage and of the
    screen (None for a study without one)."""
    full = {k: v for k, v in measure.items() if k not in ("screen", "promote")}
    screen = measure.get("screen")
    if screen is None:
        return full, None
    return full, {**full, "hot_window_s": screen["hot_window_s"], "target_s": screen["target_s"],
                  "cold_samples": screen["cold_samples"],
                  "warmup_s": screen.get("warmup_s", full["warmup_s"])}  # stored before screens had one
