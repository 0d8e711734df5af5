"""How a candidate compares with the baseline, from a validation's interleaved rounds.

A validation job measures the baseline and every candidate once per round, in a rotated
order, for many rounds on one worker; a validation may be several jobs on several workers
(GPUs of the same model). Per objective:

- each round gives a paired log-ratio d = ln(candidate / baseline). Pairing within a round
  cancels what drifts between rounds and hits both alike (clocks under the power limit,
  temperature, other tenants); the logarithm makes a ratio symmetric (0.8x and 1.25x are
  equally far from 1) and turns it into a difference;
- the estimate is the mean of d over all rounds, the ratio exp(mean) (the ratio of the
  geometric means of the paired values);
- its confidence interval is Student's t interval on d with the jobs as blocks: each job's
  own mean is removed before the spread is pooled (a one-way layout with fixed job
  effects), so a GPU that is uniformly faster or slower cannot widen the interval, and
  df = rounds - jobs. A t interval rather than a bootstrap: a validation has tens of rounds,
  where a percentile bootstrap is known to under-cover while the t interval is exact for
  normal log-ratios and robust to moderate skew (each round's value is itself a median of
  many samples, so its distribution is well behaved). tests/domain simulate known ratios
  and check the coverage;
- `significant` when the interval excludes 1, and the verdict better / worse by the
  objective's direction; `insufficient` when fewer than jobs + 1 rounds leave no spread to
  estimate.
Rounds where either value is not a positive finite number have no log-ratio; they are left
out and counted, except for a metric read exactly (the same value in every round of both, as
a compiler's report is): it is compared exactly, zeros included (0 spill bytes against 48 is
better, 0 against 0 no different), with an interval of width 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from service.domain.student_t import t_quantile
from wire.artifact import ValidatedMetric
from wire.contract import ValidationReport

Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class PairedBlock:
    """One job's rounds of one objective: baseline[r] and candidate[r] measured in round r."""

    baseline: Sequence[float]
    candidate: Sequence[float]


def _usable(value: float) -> bool:
    return math.isfinite(value) and value > 0


def compare(
    blocks: Sequence[PairedBlock],
    *,
    objective: str,
    direction: Direction,
    unit: str = "",
    confidence: float = 0.95,
) -> ValidatedMetric:
    """The candidate against the baseline on one objective, over every job's rounds."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    exact = _exact(blocks)
    if exact is not None:
        return _exactly(exact, blocks, objective, direction, unit, confidence)
    per_job: list[list[tuple[float, float]]] = []  # (ln baseline, ln candidate) of each usable round
    excluded = 0
    for block in blocks:
        pairs = []
        for b, c in zip(block.baseline, block.candidate, strict=False):  # a failed config stops early
            if _usable(b) and _usable(c):
                pairs.append((math.log(b), math.log(c)))
            else:
                excluded += 1
        if pairs:
            per_job.append(pairs)
    rounds, jobs = sum(len(p) for p in per_job), len(per_job)
    baseline = candidate = ratio = low = high = None
    if rounds:
        log_ratios = [[c - b for b, c in pairs] for pairs in per_job]
        mean = math.fsum(d for job in log_ratios for d in job) / rounds
        ratio = math.exp(mean)
        baseline = math.exp(math.fsum(b for pairs in per_job for b, _ in pairs) / rounds)
        candidate = math.exp(math.fsum(c for pairs in per_job for _, c in pairs) / rounds)
        if rounds > jobs:  # df = rounds - jobs: a spread is left after the job means
            within = math.fsum((d - math.fsum(job) / len(job)) ** 2 for job in log_ratios for d in job)
            df = rounds - jobs
            half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(within / df / rounds)
            low, high = math.exp(mean - half), math.exp(mean + half)
    gain = None if ratio is None else _gain(ratio, direction)
    gain_low = gain_high = None
    if low is not None and high is not None:
        gain_low, gain_high = sorted((_gain(low, direction), _gain(high, direction)))
    significant = low is not None and high is not None and (high < 1.0 or low > 1.0)
    verdict: Literal["better", "worse", "no_difference", "insufficient"] = "insufficient"
    if low is not None:
        verdict = "no_difference" if not significant else "better" if (gain or 0) > 1 else "worse"
    return ValidatedMetric(
        objective=objective,
        direction=direction,
        unit=unit,
        baseline=baseline,
        candidate=candidate,
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        gain=gain,
        gain_ci_low=gain_low,
        gain_ci_high=gain_high,
        significant=significant,
        verdict=verdict,
        confidence=confidence,
        rounds=rounds,
        jobs=jobs,
        excluded=excluded,
    )


def _exact(blocks: Sequence[PairedBlock]) -> tuple[float, float] | None:
    """(baseline, candidate) when every round of every block read the same finite,
    non-negative values; else None."""
    values = {(b, c) for block in blocks for b, c in zip(block.baseline, block.candidate, strict=False)}
    if len(values) != 1:
        return None
    (b, c), = values
    return (b, c) if math.isfinite(b) and math.isfinite(c) and b >= 0 and c >= 0 else None


def _exactly(values: tuple[float, float], blocks: Sequence[PairedBlock], objective: str, direction: Direction,
             unit: str, confidence: float) -> ValidatedMetric:
    baseline, candidate = values
    rounds = sum(min(len(b.baseline), len(b.candidate)) for b in blocks)
    ratio = candidate / baseline if baseline > 0 else (1.0 if candidate == 0 else None)
    better = candidate < baseline if direction == "minimize" else candidate > baseline
    verdict: Literal["better", "worse", "no_difference"] = (
        "no_difference" if candidate == baseline else "better" if better else "worse")
    gain = None if ratio is None or ratio == 0 and direction == "minimize" else _gain(ratio, direction)
    return ValidatedMetric(
        objective=objective, direction=direction, unit=unit, baseline=baseline, candidate=candidate, ratio=ratio,
        ci_low=ratio, ci_high=ratio, gain=gain, gain_ci_low=gain, gain_ci_high=gain,
        significant=verdict != "no_difference", verdict=verdict, confidence=confidence, rounds=rounds,
        jobs=len([b for b in blocks if b.baseline and b.candidate]), excluded=0,
    )


def _gain(ratio: float, direction: Direction) -> float:
    """The improvement factor of a ratio candidate/baseline: above 1 is better."""
    return 1.0 / ratio if direction == "minimize" else ratio


def compare_reports(
    reports: Sequence[ValidationReport],
    candidate_id: int,
    objectives: Sequence[tuple[str, Direction]],
    confidence: float = 0.95,
) -> list[ValidatedMetric]:
    """Each objective of one candidate over the jobs of a validation (their reports)."""
    results = []
    for name, direction in objectives:
        blocks, unit = [], ""
        for report in reports:
            outcome = next((c for c in report.candidates if c.candidate_id == candidate_id), None)
            if outcome is None or name not in outcome.values or name not in report.baseline.values:
                continue
            unit = unit or outcome.units.get(name, "")
            blocks.append(PairedBlock(report.baseline.values[name], outcome.values[name]))
        results.append(compare(blocks, objective=name, direction=direction, unit=unit, confidence=confidence))
    return results
