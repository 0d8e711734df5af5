"""Per-token objectives from a workload's weighted per-call objectives, worked by hand."""

from __future__ import annotations

import pytest

from service.workloads.objectives import OBJECTIVES, Estimate, layer_per_token, per_token, tokens_per_call
from wire.contract import WorkloadShape

# three quarters of the steps decode 8 tokens, a quarter run 512: a mean call serves 134 tokens
MIX = [WorkloadShape(dims={"m": 8, "n": 4096}, weight=0.75), WorkloadShape(dims={"m": 512, "n": 4096}, weight=0.25)]


def test_tokens_per_call() -> None:
    assert tokens_per_call(MIX) == 0.75 * 8 + 0.25 * 512 == 134
    assert tokens_per_call([WorkloadShape(dims={"rows": 10}, weight=3)], "rows") == 10
    with pytest.raises(ValueError, match="token dim 'm'"):
        tokens_per_call([WorkloadShape(dims={"rows": 10})])


def test_per_token_objectives() -> None:
    # runtime_ms 0.268 ms per call (interval 0.2546..0.2814), energy 134 mJ per call (127.3..140.7)
    values = per_token(MIX, Estimate(0.268, 0.2546, 0.2814), Estimate(134.0, 127.3, 140.7))
    assert values["time_per_token_us"].value == pytest.approx(2.0)  # 268 us / 134 tokens
    assert (values["time_per_token_us"].low, values["time_per_token_us"].high) == pytest.approx((1.9, 2.1))
    assert values["energy_per_token_mj"].value == pytest.approx(1.0)
    assert values["tokens_per_joule"].value == pytest.approx(1000.0)
    per_joule = values["tokens_per_joule"]
    assert (per_joule.low, per_joule.high) == pytest.approx((1000 / 1.05, 1000 / 0.95))
    assert set(values) == set(OBJECTIVES)
    assert set(per_token(MIX, Estimate(0.268), None)) == {"time_per_token_us"}


def test_a_layer_adds_its_kernels_as_often_as_they_run() -> None:
    gemm = {"time_per_token_us": Estimate(2.0, 1.9, 2.1), "energy_per_token_mj": Estimate(1.0, 0.9, 1.1)}
    norm = {"time_per_token_us": Estimate(0.25, 0.2, 0.3), "energy_per_token_mj": Estimate(0.1, 0.08, 0.12)}
    layer = layer_per_token([(1, gemm), (2, norm)])  # RMSNorm runs twice a layer
    assert layer["time_per_token_us"].value == pytest.approx(2.5)
    assert (layer["time_per_token_us"].low, layer["time_per_token_us"].high) == pytest.approx((2.3, 2.7))
    assert layer["energy_per_token_mj"].value == pytest.approx(1.2)
    assert layer["tokens_per_joule"].value == pytest.approx(1000 / 1.2)
    # a kernel without energy: no layer energy (a partial sum would flatter the layer)
    assert set(layer_per_token([(1, gemm), (1, {"time_per_token_us": Estimate(1.0)})])) == {"time_per_token_us"}
    assert layer_per_token([(1, gemm), (1, {"time_per_token_us": Estimate(1.0)})])["time_per_token_us"].low is None
