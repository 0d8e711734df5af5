"""Student's t against published table values and a brute-force integral of its density."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.student_t import regularized_beta, t_cdf, t_quantile

# two-sided 95% and 99% critical values from standard t tables
TABLE = [
    (1, 0.975, 12.706),
    (2, 0.975, 4.303),
    (3, 0.975, 3.182),
    (5, 0.975, 2.571),
    (9, 0.975, 2.262),
    (14, 0.975, 2.145),
    (30, 0.975, 2.042),
    (120, 0.975, 1.980),
    (4, 0.995, 4.604),
    (10, 0.995, 3.169),
    (20, 0.95, 1.725),
]


@pytest.mark.parametrize(("df", "p", "expected"), TABLE)
def test_quantiles_match_the_tables(df: int, p: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=6e-4)


def test_large_df_tends_to_the_normal() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)


def _density(x: float, df: float) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _cdf_by_simpson(t: float, df: float, steps: int = 4000) -> float:
    """0.5 + the integral of the density from 0 to t (Simpson's rule), independent of the
    incomplete beta function."""
    h = t / steps
    total = _density(0, df) + _density(t, df)
    total += sum((4 if i % 2 else 2) * _density(i * h, df) for i in range(1, steps))
    return 0.5 + total * h / 3


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.5, max_value=80), st.floats(min_value=-8, max_value=8))
def test_cdf_matches_the_integrated_density(df: float, t: float) -> None:
    assert t_cdf(t, df) == pytest.approx(_cdf_by_simpson(t, df), abs=1e-8)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.5, max_value=500), st.floats(min_value=1e-6, max_value=1 - 1e-6))
def test_quantile_inverts_the_cdf(df: float, p: float) -> None:
    q = t_quantile(p, df)
    assert t_cdf(q, df) == pytest.approx(p, abs=1e-10)
    assert t_quantile(1 - p, df) == pytest.approx(-q, rel=1e-9, abs=1e-9)


def test_incomplete_beta_closed_forms() -> None:
    # I_x(1, b) = 1 - (1 - x)^b and I_x(a, 1) = x^a
    for x in (0.01, 0.3, 0.77, 0.999):
        assert regularized_beta(x, 1.0, 3.5) == pytest.approx(1 - (1 - x) ** 3.5, rel=1e-12)
        assert regularized_beta(x, 2.5, 1.0) == pytest.approx(x**2.5, rel=1e-12)
    with pytest.raises(ValueError):
        regularized_beta(1.5, 1, 1)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
