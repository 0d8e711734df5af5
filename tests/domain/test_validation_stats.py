"""Validation statistics: candidate/baseline ratios with intervals, against hand computation
with table t-values, and coverage on simulated rounds with a known true ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.artifacts.comparison import PairedBlock, compare, compare_reports
from wire.contract import ConfigOutcome, ValidationReport

T975 = {9: 2.262157, 14: 2.144787, 17: 2.109816}  # t quantiles from the tables


def test_one_job_by_hand() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(1.0, 1.2, 10)
    cand = base * rng.uniform(0.85, 0.95, 10)
    d = np.log(cand / base)
    half = T975[9] * d.std(ddof=1) / math.sqrt(10)
    result = compare([PairedBlock(base, cand)], objective="runtime_ms", direction="minimize", unit="ms")
    assert result.ratio == pytest.approx(math.exp(d.mean()), rel=1e-12)
    assert result.ci_low == pytest.approx(math.exp(d.mean() - half), rel=1e-5)
    assert result.ci_high == pytest.approx(math.exp(d.mean() + half), rel=1e-5)
    assert result.baseline == pytest.approx(math.exp(np.log(base).mean()))
    assert result.candidate == pytest.approx(math.exp(np.log(cand).mean()))
    assert result.gain == pytest.approx(1 / result.ratio)
    assert result.gain_ci_low == pytest.approx(1 / result.ci_high)
    assert (result.significant, result.verdict, result.rounds, result.jobs) == (True, "better", 10, 1)


def test_jobs_are_blocks_by_hand() -> None:
    """Two GPUs, one 20% slower on both configurations: the job means are removed before
    the spread is pooled, df = 16 - 2."""
    rng = np.random.default_rng(2)
    blocks, logs = [], []
    for speed in (1.0, 1.2):
        base = speed * rng.uniform(1.0, 1.05, 8)
        cand = base * 1.03 * rng.lognormal(0, 0.01, 8)
        blocks.append(PairedBlock(base, cand))
        logs.append(np.log(cand / base))
    within = sum(((x - x.mean()) ** 2).sum() for x in logs)
    mean = np.concatenate(logs).mean()
    half = T975[14] * math.sqrt(within / 14 / 16)
    result = compare(blocks, objective="energy_mj", direction="minimize")
    assert result.ci_low == pytest.approx(math.exp(mean - half), rel=1e-5)
    assert result.ci_high == pytest.approx(math.exp(mean + half), rel=1e-5)
    assert (result.verdict, result.jobs, result.rounds) == ("worse", 2, 16)


def test_direction_and_verdicts() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 100.2]
    higher = [b * 1.1 * f for b, f in zip(base, [1.0, 1.01, 0.99, 1.0, 1.005], strict=True)]
    up = compare([PairedBlock(base, higher)], objective="gflops", direction="maximize")
    assert up.gain == pytest.approx(up.ratio) and up.verdict == "better"
    down = compare([PairedBlock(base, higher)], objective="runtime_ms", direction="minimize")
    assert down.gain == pytest.approx(1 / down.ratio) and down.verdict == "worse"
    same = compare(
        [PairedBlock(base, [b * f for b, f in zip(base, [1.01, 0.99, 1.0, 1.005, 0.995], strict=True)])],
        objective="runtime_ms",
        direction="minimize",
    )
    assert (same.significant, same.verdict) == (False, "no_difference")
    assert same.ci_low < 1 < same.ci_high


def test_too_few_rounds_and_unusable_values() -> None:
    empty = compare([], objective="runtime_ms", direction="minimize")
    assert (empty.verdict, empty.ratio, empty.rounds) == ("insufficient", None, 0)
    one_each = compare([PairedBlock([1.0], [0.9]), PairedBlock([1.1], [1.0])], objective="x", direction="minimize")
    assert one_each.verdict == "insufficient" and one_each.ci_low is None and one_each.ratio is not None
    with_bad = compare(
        [PairedBlock([1.0, 0.0, 1.0, float("nan"), 1.0], [0.9, 0.9, 0.91, 0.9, 0.89])],
        objective="x",
        direction="minimize",
    )
    assert (with_bad.rounds, with_bad.excluded) == (3, 2)
    failed_early = compare([PairedBlock([1.0] * 6, [0.9, 0.91])], objective="x", direction="minimize")
    assert failed_early.rounds == 2  # the candidate stopped after two rounds


def _simulate(rng: np.random.Generator, ratio: float, rounds: int, jobs: int, noise: float, heavy: bool) -> list:
    """Rounds with a drift common to both configurations (clocks, temperature), a GPU speed
    per job, and independent noise per measurement."""
    blocks = []
    for _ in range(jobs):
        gpu = rng.uniform(0.8, 1.25)
        drift = np.exp(np.cumsum(rng.normal(0, 0.03, rounds)))
        shock = (
            (lambda: rng.standard_t(5, rounds) * noise / math.sqrt(5 / 3))
            if heavy
            else (lambda: rng.normal(0, noise, rounds))
        )
        base = gpu * drift * np.exp(shock())
        cand = ratio * gpu * drift * np.exp(shock())
        blocks.append(PairedBlock(list(base), list(cand)))
    return blocks


@pytest.mark.parametrize(("rounds", "jobs", "heavy"), [(10, 1, False), (8, 3, False), (20, 2, True)])
def test_interval_covers_the_true_ratio(rounds: int, jobs: int, heavy: bool) -> None:
    rng = np.random.default_rng(20261201 + rounds * jobs)
    true_ratio, trials, covered = 0.93, 2000, 0
    for _ in range(trials):
        result = compare(_simulate(rng, true_ratio, rounds, jobs, 0.02, heavy), objective="x", direction="minimize")
        covered += result.ci_low <= true_ratio <= result.ci_high
    # 95% nominal; three binomial standard errors of 2000 trials are 0.015
    assert abs(covered / trials - 0.95) < 0.015 + (0.01 if heavy else 0)


def test_false_alarms_at_the_nominal_rate_and_drift_does_not_hide_a_gain() -> None:
    rng = np.random.default_rng(7)
    alarms = sum(
        compare(_simulate(rng, 1.0, 12, 2, 0.02, False), objective="x", direction="minimize").significant
        for _ in range(2000)
    )
    assert abs(alarms / 2000 - 0.05) < 0.015
    # a 3% gain under 30% swings of the machine's speed between rounds
    blocks = []
    for _ in range(2):
        drift = np.exp(rng.normal(0, 0.3, 15))
        base = drift * np.exp(rng.normal(0, 0.005, 15))
        blocks.append(PairedBlock(list(base), list(0.97 * drift * np.exp(rng.normal(0, 0.005, 15)))))
    result = compare(blocks, objective="runtime_ms", direction="minimize")
    assert result.verdict == "better" and result.ci_high < 0.99


def _report(candidate_values: dict[int, list[float]], baseline: list[float]) -> ValidationReport:
    return ValidationReport(
        status="completed",
        rounds=len(baseline),
        baseline=ConfigOutcome(
            candidate_id=None, status="ok", values={"runtime_ms": baseline}, units={"runtime_ms": "ms"}
        ),
        candidates=[
            ConfigOutcome(candidate_id=cid, status="ok", values={"runtime_ms": v}, units={"runtime_ms": "ms"})
            for cid, v in candidate_values.items()
        ],
    )


def test_compare_reports_pools_the_jobs_of_one_candidate() -> None:
    a = _report({1: [0.9, 0.91, 0.89, 0.9], 2: [1.2, 1.21, 1.19, 1.2]}, [1.0, 1.01, 0.99, 1.0])
    b = _report({1: [1.8, 1.83, 1.79, 1.8], 2: [2.4, 2.4, 2.41, 2.39]}, [2.0, 2.02, 1.99, 2.0])
    (first,) = compare_reports([a, b], 1, [("runtime_ms", "minimize")])
    expected = compare(
        [
            PairedBlock([1.0, 1.01, 0.99, 1.0], [0.9, 0.91, 0.89, 0.9]),
            PairedBlock([2.0, 2.02, 1.99, 2.0], [1.8, 1.83, 1.79, 1.8]),
        ],
        objective="runtime_ms",
        direction="minimize",
        unit="ms",
    )
    assert first == expected
    assert (first.jobs, first.rounds, first.unit) == (2, 8, "ms")
    (second,) = compare_reports([a, b], 2, [("runtime_ms", "minimize")])
    assert second.verdict == "worse"


def test_a_metric_read_exactly_is_compared_exactly_zeros_included() -> None:
    """A compiler's report is the same in every round: 0 spill bytes against 48 is better,
    0 against 0 no different, 96 registers against 128 a ratio of 0.75 with no spread."""
    from service.artifacts.comparison import PairedBlock, compare

    fewer = compare([PairedBlock([48.0] * 3, [0.0] * 3)], objective="spill_bytes", direction="minimize")
    assert (fewer.verdict, fewer.significant, fewer.ratio, fewer.rounds) == ("better", True, 0.0, 3)
    more = compare([PairedBlock([0.0, 0.0], [16.0, 16.0])], objective="spill_bytes", direction="minimize")
    assert (more.verdict, more.ratio, more.candidate) == ("worse", None, 16.0)
    same = compare([PairedBlock([0.0] * 2, [0.0] * 2)], objective="spill_bytes", direction="minimize")
    assert (same.verdict, same.ratio, same.significant) == ("no_difference", 1.0, False)
    registers = compare([PairedBlock([128.0] * 2, [96.0] * 2), PairedBlock([128.0], [96.0])],
                        objective="registers", direction="minimize")
    assert (registers.ratio, registers.ci_low, registers.ci_high, registers.jobs) == (0.75, 0.75, 0.75, 2)
    # measured values that vary keep the paired log-ratio statistics
    noisy = compare([PairedBlock([1.0, 1.1, 0.9], [0.8, 0.85, 0.75])], objective="runtime_ms", direction="minimize")
    assert noisy.ci_low is not None and noisy.ci_low < noisy.ratio < noisy.ci_high
