"""summarize() and percentile() checked against independent computations: brute-force
enumeration of the binomial distribution, direct order-statistic formulas, and the coverage
of the median interval on simulated data from distributions with a known median."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.measure.stats import binomial_half_cdf, median_ci_ranks, percentile, summarize


def test_percentile_matches_the_order_statistic_definition():
    samples = [7.0, 1.0, 3.0, 9.0, 5.0]  # sorted: 1 3 5 7 9
    assert percentile(samples, 0) == 1.0
    assert percentile(samples, 100) == 9.0
    assert percentile(samples, 50) == 5.0
    assert percentile(samples, 25) == 3.0
    assert percentile(samples, 90) == pytest.approx(7.0 + 0.6 * 2.0)  # position 3.6


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60), st.floats(0, 100))
def test_percentile_agrees_with_statistics_quantiles(samples, q):
    ordered = sorted(samples)
    got = percentile(samples, q)
    assert ordered[0] <= got <= ordered[-1]
    if len(samples) >= 2 and q not in (0, 100):
        # statistics.quantiles(method="inclusive") is the same linear interpolation
        cuts = statistics.quantiles(samples, n=100, method="inclusive")
        if float(q).is_integer() and 1 <= q <= 99:
            assert got == pytest.approx(cuts[int(q) - 1], rel=1e-9, abs=1e-6)


def test_binomial_cdf_by_enumeration():
    for n in range(1, 15):
        outcomes = list(itertools.product((0, 1), repeat=n))
        for k in range(-1, n + 1):
            brute = sum(1 for o in outcomes if sum(o) <= k) / len(outcomes)
            assert binomial_half_cdf(k, n) == pytest.approx(brute, abs=1e-12)


def test_binomial_cdf_log_space_agrees_with_exact():
    n = 1001  # just past the exact-integer limit
    for k in (400, 480, 500, 520):
        exact = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
        assert binomial_half_cdf(k, n) == pytest.approx(exact, rel=1e-9)


def test_ranks_are_the_narrowest_with_enough_exact_coverage():
    def coverage(j: int, n: int) -> float:  # P(x(j) <= median <= x(n-j+1)), by math.comb
        return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n

    for n in (6, 10, 20, 30, 100, 257):
        low, high, promised = median_ci_ranks(n)
        assert high == n - low + 1
        assert coverage(low, n) == pytest.approx(promised) and promised >= 0.95
        assert coverage(low + 1, n) < 0.95  # one rank narrower would not do
    assert median_ci_ranks(10)[:2] == (2, 9)
    assert median_ci_ranks(100)[:2] == (40, 61)  # exact: (41, 60) covers only 94.3%


def test_small_samples_report_their_lower_coverage():
    low, high, coverage = median_ci_ranks(5)
    assert (low, high) == (1, 5)
    assert coverage == pytest.approx(1 - 2 / 32)


@pytest.mark.parametrize("n", [9, 25, 60])
def test_interval_covers_the_true_median_on_simulated_data(n):
    rng = random.Random(n)
    true_median = math.log(2)  # of Exp(1): skewed, like timings
    trials, covered = 2000, 0
    for _ in range(trials):
        m = summarize([rng.expovariate(1.0) for _ in range(n)])
        covered += m.ci_low <= true_median <= m.ci_high
    promised = median_ci_ranks(n)[2]
    assert promised >= 0.95
    # the coverage is exactly `promised` for continuous data; allow 4 binomial sigmas
    sigma = math.sqrt(promised * (1 - promised) / trials)
    assert abs(covered / trials - promised) < 4 * sigma + 1e-9


def test_summarize_fields():
    samples = [float(x) for x in range(1, 101)]
    m = summarize(samples, unit="ms")
    assert m.unit == "ms" and m.n == 100
    assert m.value == m.stats["median"] == 50.5
    assert m.stats["mean"] == 50.5
    assert m.stats["min"] == 1 and m.stats["max"] == 100
    assert m.stats["p99"] == pytest.approx(99.01)
    assert m.stats["std"] == pytest.approx(statistics.stdev(samples))
    assert (m.ci_low, m.ci_high) == (40.0, 61.0)


def test_summarize_single_sample_and_errors():
    m = summarize([2.5])
    assert m.value == 2.5 and m.n == 1 and m.ci_low is None and m.stats["std"] == 0
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


@settings(max_examples=200)
@given(st.lists(st.floats(0, 1e3), min_size=2, max_size=200), st.floats(0.5, 0.99))
def test_interval_brackets_the_median(samples, confidence):
    m = summarize(samples, confidence=confidence)
    assert m.stats["min"] <= m.ci_low <= m.value <= m.ci_high <= m.stats["max"]
    assert m.stats["min"] <= m.stats["p99"] <= m.stats["max"]
