"""wire.per_token against hand-computed values: what a backend is asked to measure, and the
per-token metrics derived from what it measured."""

from __future__ import annotations

import pytest

from wire import per_token
from wire.contract import KernelSpec, Metric, WorkloadShape

KERNEL = KernelSpec(backend="cpu", builtin="matmul", workload=[WorkloadShape(dims={"m": 1}, weight=3),
                                                               WorkloadShape(dims={"m": 9}, weight=1)])  # m = 3


def test_backends_measure_the_sources_once() -> None:
    assert per_token.measured(["tokens_per_joule", "time_per_token_us", "energy_per_token_mj", "p99_ms"]) == [
        "energy_mj", "runtime_ms", "p99_ms"]


def test_derived_by_hand() -> None:
    metrics = {"runtime_ms": Metric(value=0.6, ci_low=0.3, ci_high=0.9, n=5, unit="ms",
                                    stats={"max": 1.2, "ci_coverage": 0.96}),
               "energy_mj": Metric(value=6.0, ci_low=3.0, ci_high=12.0, unit="mJ", stats={"min": 1.5, "max": 15.0})}
    got = per_token.derived(metrics, ["time_per_token_us", "energy_per_token_mj", "tokens_per_joule"], KERNEL)
    assert (got["time_per_token_us"].value, got["time_per_token_us"].ci_low) == (pytest.approx(200), pytest.approx(100))
    assert got["time_per_token_us"].stats == {"max": pytest.approx(400), "ci_coverage": 0.96}
    assert got["energy_per_token_mj"].value == pytest.approx(2.0)
    joules = got["tokens_per_joule"]  # 1000 / 2 mJ; bounds 1000 / 4 and 1000 / 1
    assert (joules.value, joules.ci_low, joules.ci_high) == (pytest.approx(500), pytest.approx(250),
                                                            pytest.approx(1000))
    assert joules.stats == {"min": pytest.approx(200), "max": pytest.approx(2000)} and joules.unit == "tokens/J"
    with pytest.raises(ValueError, match="token dim 'rows'"):
        per_token.derived(metrics, ["time_per_token_us"], KERNEL.model_copy(update={"options": {"token_dim": "rows"}}))
