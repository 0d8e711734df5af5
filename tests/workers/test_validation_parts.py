"""The pure parts of validation jobs: extended shapes, the rotation of rounds, per-shape
correctness from each backend's check details, and the wire contract."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from wire.contract import KernelSpec, Lease, TrialSpec, ValidationCandidate, ValidationSpec, WorkloadShape
from workers.backends.cpu_problems import get_problem
from workers.measure.gpu_check import ShapeCheck, verdict
from workers.validation.rounds import round_order, shape_results
from workers.validation.shapes import ShapeRuleError, extended_shapes, half, ragged


def dims_of(kernel: KernelSpec) -> list[dict[str, int]]:
    return [s.dims for s in extended_shapes(kernel)]


def _size(dims: dict[str, int]) -> int:
    return math.prod(max(1, v) for v in dims.values())


@pytest.mark.parametrize(
    ("backend", "name"),
    [("cpu", "matmul"), ("cpu", "stencil"), ("triton", "gemm_bf16"), ("triton", "attention_fwd"), ("cuda", "rmsnorm")],
)
def test_builtin_shapes_follow_their_declared_rules(backend: str, name: str) -> None:
    from wire.kernels import get_builtin

    builtin = get_builtin(backend, name)
    assert builtin is not None
    shapes = dims_of(KernelSpec(backend=backend, builtin=name))
    workload = [w["dims"] for w in builtin.workload]
    if backend == "cpu":
        workload = [get_problem(builtin.options["problem"]).shape(d) for d in workload]
    assert shapes[:1] == workload[:1] and all(w in shapes for w in workload)
    assert len(shapes) == len({tuple(sorted(d.items())) for d in shapes}) >= 3 * len(workload)
    largest = max(_size(w) for w in workload)
    for dims in shapes:
        assert _size(dims) <= 2 * largest
        for dim, rule in builtin.shape_rules.items():
            if rule == "fixed":
                assert {d[dim] for d in shapes} == {w[dim] for w in workload}
            elif rule.startswith("multiple_of:"):
                assert dims[dim] % int(rule.split(":")[1]) == 0
    # some shape has every varied dim odd (in units of its multiple): remainders are exercised
    varied = [d for d in shapes[0] if builtin.shape_rules.get(d, "free") != "fixed"]
    step = {
        d: int(builtin.shape_rules[d].split(":")[1]) if ":" in builtin.shape_rules.get(d, "") else 1 for d in varied
    }
    assert any(all((s[d] // step[d]) % 2 == 1 for d in varied) for s in shapes)


def test_cpu_shapes_are_valid_problem_shapes_and_differ_per_dim() -> None:
    shapes = dims_of(KernelSpec(backend="cpu", builtin="matmul", workload=[WorkloadShape(dims={"n": 96})]))
    assert shapes == [
        {"m": 96, "n": 96, "k": 96},
        {"m": 48, "n": 48, "k": 48},
        {"m": 95, "n": 93, "k": 91},
        {"m": 192, "n": 96, "k": 96},
    ]
    problem = get_problem("matmul")
    assert all(problem.shape(d) == d for d in shapes)


def test_study_kernels_declare_rules_and_extra_shapes() -> None:
    kernel = KernelSpec(
        backend="triton",
        source="...",
        entry="k",
        workload=[WorkloadShape(dims={"tokens": 512, "hidden": 4096, "heads": 32})],
        options={
            "shape_rules": {"hidden": "multiple_of:64", "heads": "power_of_2"},
            "validation_shapes": [{"tokens": 1, "hidden": 4096, "heads": 32}],
        },
    )
    shapes = dims_of(kernel)
    assert shapes == [
        {"tokens": 512, "hidden": 4096, "heads": 32},
        {"tokens": 256, "hidden": 2048, "heads": 16},
        {"tokens": 511, "hidden": 3904, "heads": 32},  # 61 x 64: the second dim steps down twice
        {"tokens": 1024, "hidden": 4096, "heads": 32},
        {"tokens": 1, "hidden": 4096, "heads": 32},
    ]
    with pytest.raises(ShapeRuleError, match="multiple_of:N"):
        dims_of(kernel.model_copy(update={"options": {"shape_rules": {"hidden": "even"}}}))


@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=0, max_value=4))
def test_ragged_sizes_are_odd_and_smaller(value: int, index: int) -> None:
    r = ragged(value, "free", index)
    assert r % 2 == 1 and (r < value or value <= 2 * index + 2)
    m = ragged(value * 8, "multiple_of:8", index)
    assert m % 8 == 0 and (m // 8) % 2 == 1
    assert 1 <= half(value, "free") <= value
    assert half(value * 16, "multiple_of:16") % 16 == 0


@given(st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=100))
def test_round_order_rotates(count: int, start: int) -> None:
    rounds = [round_order(count, r) for r in range(start, start + count)]
    assert all(sorted(order) == list(range(count)) for order in rounds)
    assert sorted(order[0] for order in rounds) == list(range(count))  # each first exactly once


def test_shape_results_from_gpu_check_details() -> None:
    shapes = [WorkloadShape(dims={"m": 64, "n": 64}), WorkloadShape(dims={"m": 63, "n": 61})]
    checks = [
        ShapeCheck("m64_n64", rel_l2_err=1e-3, max_abs_err=0.01, nan_count=0, unwritten=0),
        ShapeCheck("m63_n61", rel_l2_err=0.4, max_abs_err=2.0, nan_count=0, unwritten=61),
    ]
    passed, details = verdict(checks, 2e-2, seed=1)
    results = shape_results(details, passed, shapes)
    assert [r.dims for r in results] == [{"m": 64, "n": 64}, {"m": 63, "n": 61}]
    assert [r.passed for r in results] == [True, False]
    assert results[1].errors == {"rel_l2_err": 0.4, "max_abs_err": 2.0, "nan_count": 0.0, "unwritten": 61.0}
    assert results[0].tolerance == 2e-2


def test_shape_results_from_cpu_details_and_shapeless_checks() -> None:
    details = {
        "tolerance": 1e-4,
        "shapes": [
            {"dims": {"m": 8}, "max_abs_err": 0.0, "rel_err": 1e-7},
            {"dims": {"m": 9}, "max_abs_err": 3.0, "rel_err": 0.5},
            {"dims": {"m": 10}, "max_abs_err": float("nan"), "rel_err": float("inf")},
        ],
    }
    assert [r.passed for r in shape_results(details, False, [])] == [True, False, False]
    (whole,) = shape_results({"checked": "import only"}, True, [])
    assert whole.passed and whole.dims == {}


def _trial() -> TrialSpec:
    return TrialSpec(
        trial_id=1,
        study_id=1,
        number=1,
        attempt=1,
        is_baseline=False,
        kernel=KernelSpec(backend="cpu", builtin="matmul"),
        config={},
        objectives=["runtime_ms"],
        compile_timeout_s=10,
        run_timeout_s=10,
    )


def _validation(**changes) -> ValidationSpec:
    fields = dict(
        validation_id=1,
        job_id=2,
        study_id=1,
        kernel=KernelSpec(backend="cpu", builtin="matmul"),
        baseline={},
        candidates=[ValidationCandidate(candidate_id=4, config={"opt": "-O3"})],
        objectives=["runtime_ms"],
        rounds=10,
        compile_timeout_s=10,
        run_timeout_s=100,
    )
    return ValidationSpec(**{**fields, **changes})


def test_a_lease_holds_one_unit_of_work() -> None:
    common = dict(token="t", expires_at=datetime.now(UTC), lease_s=10, heartbeat_s=1)
    lease = Lease(**common, kind="validation", work=_validation())
    read = Lease.model_validate_json(lease.model_dump_json())
    assert read.kind == "validation" and ValidationSpec.model_validate(read.work) == _validation()
    assert "validation" not in lease.model_dump() and "trial" not in lease.model_dump()
    legacy = Lease(**common, trial=_trial())  # as a service sends it to a worker of contract 3
    assert Lease.model_validate_json(legacy.model_dump_json()) == legacy and "kind" not in legacy.model_dump()
    for wrong in ({}, {"trial": _trial(), "validation": _validation()}, {"kind": "trial"},
                  {"kind": "trial", "work": _trial(), "trial": _trial()}):
        with pytest.raises(ValidationError, match="one unit of work"):
            Lease(**common, **wrong)


def test_validation_spec_checks_its_fields() -> None:
    with pytest.raises(ValidationError, match="distinct"):
        _validation(
            candidates=[ValidationCandidate(candidate_id=4, config={}), ValidationCandidate(candidate_id=4, config={})]
        )
    with pytest.raises(ValidationError):
        _validation(rounds=1)
    with pytest.raises(ValidationError):
        _validation(candidates=[])
