"""The promotion rule of multi-fidelity measurement (service.scheduling.screening), tested directly:
against a brute-force reference that enumerates plausible values, for the safety it promises
when the full values lie where the screen put them, and on numbers recorded on the H200."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.scheduling import screening
from service.scheduling.screening import Interval, Member, Rule
from service.studies.document import DocumentError, Promote, ResolvedObjective, Screen
from wire.contract import MeasureSettings

RT_E = [ResolvedObjective(name="runtime_ms", direction="minimize"),
        ResolvedObjective(name="energy_mj", direction="minimize")]


# --- a brute-force reference ---------------------------------------------------------------


def _points(low: float, high: float, n: int = 5) -> list[float]:
    return [low + (high - low) * i / (n - 1) for i in range(n)]


def _plausible_member(interval: Interval, margin: float, direction: str) -> list[float]:
    """The member's plausible screening values, its worst end moved by the margin."""
    if direction == "minimize":
        return _points(interval.low, interval.high + margin * abs(interval.high))
    return _points(interval.low - margin * abs(interval.low), interval.high)


def _reference_beats(objective: ResolvedObjective, member: Member, screen: dict[str, Interval], rule: Rule) -> bool:
    """Every plausible value of the member better than every plausible value of the trial."""
    name, direction = objective.name, objective.direction
    if name in member.screen and name in screen:
        mine = _plausible_member(member.screen[name], rule.margin(name), direction)
        theirs = _points(screen[name].low, screen[name].high)
        better = (lambda a, b: a < b) if direction == "minimize" else (lambda a, b: a > b)
        return all(better(a, b) for a, b in itertools.product(mine, theirs))
    if name == "energy_mj" and direction == "minimize" and "runtime_ms" in member.screen and "runtime_ms" in screen:
        # energy per call is power x time: slower by more than the ratio, at any plausible runtimes
        mine = _points(member.screen["runtime_ms"].low, member.screen["runtime_ms"].high)
        theirs = _points(screen["runtime_ms"].low, screen["runtime_ms"].high)
        return all(b > rule.energy_runtime_ratio * a and a > 0 for a, b in itertools.product(mine, theirs))
    return False


def _reference_promotes(objectives: list[ResolvedObjective], screen: dict[str, Interval], front: list[Member],
                        rule: Rule, baseline: bool) -> bool:
    if baseline:
        return True
    return not any(all(_reference_beats(o, m, screen, rule) for o in objectives) for m in front)


# --- strategies ----------------------------------------------------------------------------

NAMES = ["runtime_ms", "energy_mj", "latency_ms", "f1"]


@st.composite
def intervals(draw: st.DrawFn, positive: bool = True) -> Interval:
    value = draw(st.floats(0.1, 10.0) if positive else st.floats(-10.0, 10.0))
    below = draw(st.floats(0.0, 0.3))
    above = draw(st.floats(0.0, 0.3))
    return Interval(value - below * abs(value), value, value + above * abs(value))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[ResolvedObjective], dict[str, Interval], list[Member], Rule, bool]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    objectives = [ResolvedObjective(name=n, direction="minimize" if n != "f1"
                                    else draw(st.sampled_from(["minimize", "maximize"]))) for n in names]
    screened = [n for n in names if n != "energy_mj" or draw(st.booleans())]
    if "energy_mj" in names and "energy_mj" not in screened:
        screened.append("runtime_ms")
    signed = {"f1"}

    def screen_of() -> dict[str, Interval]:
        return {n: draw(intervals(positive=n not in signed)) for n in dict.fromkeys(screened)}

    front = [Member(i, {n: draw(st.floats(0.1, 10.0)) for n in names}, screen_of())
             for i in range(draw(st.integers(0, 4)))]
    rule = Rule({n: draw(st.floats(0.0, 0.3)) for n in screened}, draw(st.floats(1.0, 3.0)))
    return objectives, screen_of(), front, rule, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_rule_agrees_with_brute_force(case) -> None:
    objectives, screen, front, rule, baseline = case
    decision = screening.decide(objectives, screen, front, rule, baseline=baseline)
    assert decision.promote == _reference_promotes(objectives, screen, front, rule, baseline)
    if not decision.promote:
        member = next(m for m in front if m.number == decision.by)
        assert all(_reference_beats(o, member, screen, rule) for o in objectives)
        # the first member (by number) that beats it is the one named
        assert not any(all(_reference_beats(o, m, screen, rule) for o in objectives)
                       for m in front if m.number < member.number)


@st.composite
def truthful(draw: st.DrawFn) -> tuple[list[ResolvedObjective], Rule, dict[str, Interval], Member, dict[str, float]]:
    """A trial and a front member whose full values lie within their screening intervals
    widened by a third of the margin, with a trial power at least the member's over the
    rule's energy ratio (up to the same noise): what the rule assumes of the H200."""
    energy = draw(st.booleans())
    objectives = RT_E if energy else [RT_E[0], ResolvedObjective(name="latency_ms", direction="minimize")]
    screened = ["runtime_ms"] if energy else ["runtime_ms", "latency_ms"]
    rule = Rule({n: draw(st.floats(0.0, 0.3)) for n in screened}, draw(st.floats(1.0, 3.0)))

    def measured() -> tuple[dict[str, Interval], dict[str, float]]:
        screen, full = {}, {}
        for name in screened:
            interval = draw(intervals())
            third = rule.margin(name) / 3
            screen[name] = interval
            full[name] = draw(st.floats(interval.low * (1 - third), interval.high * (1 + third)))
        return screen, full

    member_screen, member_full = measured()
    screen, full = measured()
    if energy:
        third = rule.margin("runtime_ms") / 3
        member_power = draw(st.floats(100.0, 800.0))
        floor = member_power * (1 + third) / ((1 - third) * rule.energy_runtime_ratio)
        member_full["energy_mj"] = member_power * member_full["runtime_ms"]
        full["energy_mj"] = draw(st.floats(floor, max(floor, 800.0))) * full["runtime_ms"]
    return objectives, rule, screen, Member(0, member_full, member_screen), full


@settings(max_examples=400, deadline=None)
@given(truthful())
def test_a_trial_screened_out_is_dominated_in_truth(case) -> None:
    objectives, rule, screen, member, full = case
    decision = screening.decide(objectives, screen, [member], rule)
    if not decision.promote:
        assert all(member.values[o.name] < full[o.name] for o in objectives)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_what_the_sampler_hears_of_a_screened_out_trial_stays_dominated(case) -> None:
    objectives, screen, front, rule, _ = case
    decision = screening.decide(objectives, screen, front, rule)
    if decision.promote:
        assert decision.told is None and decision.by is None
        return
    member = next(m for m in front if m.number == decision.by)
    assert decision.told is not None and set(decision.told) == {o.name for o in objectives}
    for o in objectives:
        if o.name in screen:  # what it measured, as measured
            assert decision.told[o.name] == screen[o.name].value
        else:  # energy at the member's power: above the member's own energy
            assert decision.told[o.name] > member.values[o.name]


# --- cases from the H200 --------------------------------------------------------------------

# the GEMM 4096^3 sweep's best (runtime_ms, energy_mj) and a configuration 17% slower
BEST = Member(50, {"runtime_ms": 0.2141, "energy_mj": 150.2},
              {"runtime_ms": Interval(0.21474, 0.21476, 0.21477)})
SLOWER = {"runtime_ms": Interval(0.25190, 0.25199, 0.25208)}
SLOWEST = {"runtime_ms": Interval(0.5402, 0.5405, 0.5409)}


def test_runtime_screens_out_what_is_slower_beyond_the_margin() -> None:
    rule = Rule({"runtime_ms": 0.04})
    objectives = RT_E[:1]
    out = screening.decide(objectives, SLOWER, [BEST], rule)
    assert not out.promote and out.by == 50 and out.told == {"runtime_ms": 0.25199}
    near = {"runtime_ms": Interval(0.2200, 0.2210, 0.2230)}  # 2.9% slower: within the margin
    assert screening.decide(objectives, near, [BEST], rule).promote


def test_energy_is_bounded_by_runtime_only_far_from_the_front() -> None:
    default = Rule({"runtime_ms": 0.04})
    assert default.energy_runtime_ratio == screening.ENERGY_RUNTIME_RATIO == 2.5
    # 17% slower could still use less energy at a lower power: measure it
    assert screening.decide(RT_E, SLOWER, [BEST], default).promote
    # 2.5 times slower cannot
    out = screening.decide(RT_E, SLOWEST, [BEST], default)
    assert not out.promote
    assert out.told is not None and out.told["energy_mj"] == pytest.approx(150.2 * 0.5405 / 0.21476)
    # a study that knows its kernel runs at the power cap may say energy follows runtime
    capped = Rule({"runtime_ms": 0.04}, energy_runtime_ratio=1.1)
    assert not screening.decide(RT_E, SLOWER, [BEST], capped).promote


def test_the_baseline_and_a_study_without_a_front_measure_fully() -> None:
    rule = Rule({"runtime_ms": 0.04})
    assert screening.decide(RT_E[:1], SLOWEST, [BEST], rule, baseline=True).promote
    assert screening.decide(RT_E[:1], SLOWEST, [], rule).promote


def test_a_maximised_objective_needs_the_member_above_by_the_margin() -> None:
    objectives = [ResolvedObjective(name="gflops", direction="maximize")]
    member = Member(1, {"gflops": 100.0}, {"gflops": Interval(99.0, 100.0, 101.0)})
    rule = Rule({"gflops": 0.05})
    assert not screening.decide(objectives, {"gflops": Interval(90.0, 93.0, 94.0)}, [member], rule).promote
    assert screening.decide(objectives, {"gflops": Interval(90.0, 93.0, 94.1)}, [member], rule).promote


def test_an_objective_the_screen_did_not_measure_is_never_beaten() -> None:
    objectives = [RT_E[0], ResolvedObjective(name="power_w", direction="minimize")]
    assert screening.decide(objectives, SLOWEST, [BEST], Rule({})).promote


def test_interval_of_a_metric() -> None:
    assert screening.Interval.of({"value": 2.0, "ci_low": 1.5, "ci_high": 2.5}) == Interval(1.5, 2.0, 2.5)
    assert screening.Interval.of({"value": 2.0, "ci_low": None}) == Interval(2.0, 2.0, 2.0)
    assert screening.Interval.of({"value": 2.0, "ci_low": 2.1, "ci_high": 1.9}) == Interval(2.0, 2.0, 2.0)


# --- the document ---------------------------------------------------------------------------


def _objectives(*names: str) -> list[ResolvedObjective]:
    return [ResolvedObjective(name=n, direction="minimize") for n in names]


FULL = {"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2, "hot_window_s": 1.6,
        "confidence": 0.95, "cold_samples": None}
SETTINGS = MeasureSettings.model_validate(FULL)


def test_default_screen_is_runtime_only_for_runtime_and_energy() -> None:
    screen, promote = screening.resolve(_objectives("runtime_ms", "energy_mj"), "triton", Screen(), None, SETTINGS)
    assert screen.model_dump() == {"hot_window_s": 0.2, "target_s": 0.05, "cold_samples": 50,
                                   "objectives": ["runtime_ms"], "warmup_s": 0.02}
    assert promote.model_dump() == {"margins": {"runtime_ms": 0.04}, "energy_runtime_ratio": 2.5}
    screen, _ = screening.resolve(_objectives("energy_mj"), "triton", Screen(), None, SETTINGS)
    assert screen.objectives == ["runtime_ms"]  # screened to bound energy
    screen, promote = screening.resolve(_objectives("runtime_ms", "p99_ms"), "cpu",
                                        Screen(cold_samples=20), Promote(margins={"p99_ms": 0.3}), SETTINGS)
    assert screen.objectives == ["runtime_ms", "p99_ms"] and screen.cold_samples == 20
    assert promote.margins == {"runtime_ms": 0.04, "p99_ms": 0.3}
    # a screen is never longer than the full measurement
    short = SETTINGS.model_copy(update={"hot_window_s": 0.1, "target_s": 0.02, "warmup_s": 0.01})
    screen, _ = screening.resolve(_objectives("runtime_ms"), "cpu", Screen(), None, short)
    assert (screen.hot_window_s, screen.target_s, screen.warmup_s) == (0.1, 0.02, 0.01)


@pytest.mark.parametrize(("objectives", "screen", "promote", "field"), [
    (_objectives("runtime_ms", "power_w"), Screen(), None, "measure.screen.objectives"),
    (_objectives("runtime_ms", "latency_ms"), Screen(objectives=["runtime_ms"]), None, "measure.screen.objectives"),
    (_objectives("energy_mj"), Screen(objectives=["energy_mj"]), None, "measure.screen.hot_window_s"),
    (_objectives("runtime_ms"), Screen(objectives=["wattage"]), None, "measure.screen.objectives.0"),
    (_objectives("runtime_ms"), Screen(objectives=["runtime_ms", "runtime_ms"]), None, "measure.screen.objectives.1"),
    (_objectives("runtime_ms"), Screen(objectives=[]), None, "measure.screen.objectives"),
    (_objectives("runtime_ms"), Screen(), Promote(margins={"p99_ms": 0.1}), "measure.promote.margins.p99_ms"),
    ([ResolvedObjective(name="energy_mj", direction="maximize")], Screen(), None, "measure.screen.objectives"),
])
def test_a_screen_that_cannot_work_is_refused_naming_the_field(objectives, screen, promote, field) -> None:
    with pytest.raises(DocumentError) as refused:
        screening.resolve(objectives, "triton", screen, promote, SETTINGS)
    assert refused.value.field == field


def test_energy_may_be_screened_with_a_long_enough_window() -> None:
    wide = Screen(hot_window_s=0.6, objectives=["runtime_ms", "energy_mj"])
    screen, promote = screening.resolve(_objectives("runtime_ms", "energy_mj"), "triton", wide, None, SETTINGS)
    assert screen.objectives == ["runtime_ms", "energy_mj"]
    assert promote.margins == {"runtime_ms": 0.04, "energy_mj": 0.05}


def test_screen_measure_splits_the_stages() -> None:
    measure = FULL
    assert screening.screen_measure(measure) == (measure, None)
    resolved = screening.resolve(_objectives("runtime_ms"), "triton", Screen(), None, SETTINGS)
    screen, promote = (part.model_dump() for part in resolved)
    full, screened = screening.screen_measure({**measure, "screen": screen, "promote": promote})
    assert full == measure
    assert screened == {**measure, "hot_window_s": 0.2, "target_s": 0.05, "cold_samples": 50, "warmup_s": 0.02}
    # an energy study's long warm-up is the full stage's only
    _, screened = screening.screen_measure({**measure, "warmup_s": 2.0, "screen": screen, "promote": promote})
    assert screened is not None and screened["warmup_s"] == 0.02
    # a screen stored before screens had a warm-up of their own takes the full stage's
    older = {k: v for k, v in screen.items() if k != "warmup_s"}
    _, screened = screening.screen_measure({**measure, "screen": older, "promote": promote})
    assert screened is not None and screened["warmup_s"] == measure["warmup_s"]
