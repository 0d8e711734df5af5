"""Sample statistics for measurements: median, tail percentiles and a distribution-free
confidence interval of the median.

Kernel timings are skewed and heavy-tailed (interrupts, frequency changes, page faults), so
the reported value is the median and its interval comes from order statistics, which assume
nothing about the distribution: for sorted samples x(1) <= ... <= x(n), the number of samples
below the true median is Binomial(n, 1/2), so [x(j), x(n-j+1)] covers the median with
probability 1 - 2 * P(Binomial(n, 1/2) <= j - 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from wire.contract import Metric

_EXACT_LIMIT = 1000  # above this many samples the binomial tail is summed in log space


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between order statistics
    (the same definition as numpy's default)."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(float(x) for x in samples)
    position = (len(ordered) - 1) * q / 100.0
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


def binomial_half_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= _EXACT_LIMIT:
        total = 0
        term = 1  # C(n, 0)
        for i in range(k + 1):
            total += term
            term = term * (n - i) // (i + 1)
        return total / 2**n
    log_half_n = n * math.log(0.5)
    log_terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
        for i in range(k + 1)
    ]
    peak = max(log_terms)
    return min(1.0, math.exp(peak) * sum(math.exp(t - peak) for t in log_terms))


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """1-based ranks (low, high) of the narrowest symmetric order-statistic interval whose
    coverage of the median is at least `confidence`, and that coverage. When n is too small
    for the confidence, the widest interval (min, max) and its lower coverage."""
    if n < 1:
        raise ValueError("need at least one sample")
    best_j = 1
    for j in range(1, n // 2 + 2):
        if n - j + 1 < j:
            break
        coverage = 1.0 - 2.0 * binomial_half_cdf(j - 1, n)
        if coverage >= confidence:
            best_j = j
        else:
            break
    coverage = max(0.0, 1.0 - 2.0 * binomial_half_cdf(best_j - 1, n))
    return best_j, n - best_j + 1, coverage


def summarize(samples: Sequence[float], unit: str = "", confidence: float = 0.95) -> Metric:
    """Median of the samples with its confidence interval and descriptive statistics."""
    values = sorted(float(x) for x in samples)
    n = len(values)
    if n == 0:
        raise ValueError("summarize needs at least one sample")
    if any(math.isnan(x) for x in values):
        raise ValueError("samples contain NaN")
    median = percentile(values, 50)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else 0.0
    stats = {
        "median": median,
        "mean": mean,
        "std": std,
        "p99": percentile(values, 99),
        "min": values[0],
        "max": values[-1],
    }
    ci_low: float | None = None
    ci_high: float | None = None
    if n > 1:
        low_rank, high_rank, coverage = median_ci_ranks(n, confidence)
        ci_low, ci_high = values[low_rank - 1], values[high_rank - 1]
        stats["ci_coverage"] = coverage
    return Metric(value=median, unit=unit, ci_low=ci_low, ci_high=ci_high, n=n, stats=stats)
