"""Artifact documents as the service will build them (phase 2), for tests of the format,
the signature, the runtime module and the CLI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from wire.artifact import (
    ArtifactDocument,
    CorrectnessSummary,
    Provenance,
    ValidatedMetric,
)
from wire.artifact_controls import controls_for, kernel_identity
from wire.contract import KernelSpec, ShapeCorrectness, Target, WorkloadShape

H200 = Target(
    gpu="NVIDIA H200",
    compute_capability="9.0",
    driver="570.133.20",
    cuda="12.8",
    triton="3.4.0",
    ptxas="12.8",
)


def metric(objective: str = "runtime_ms", ratio: float = 0.8, low: float = 0.78, high: float = 0.82) -> ValidatedMetric:
    return ValidatedMetric(
        objective=objective,
        direction="minimize",
        unit="ms",
        baseline=1.25,
        candidate=1.25 * ratio,
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        gain=1 / ratio,
        gain_ci_low=1 / high,
        gain_ci_high=1 / low,
        significant=high < 1 or low > 1,
        verdict="better" if high < 1 else "no_difference",
        confidence=0.95,
        rounds=20,
        jobs=2,
    )


def make_document(
    *,
    kernel: KernelSpec | None = None,
    config: dict[str, Any] | None = None,
    target: Target | None = None,
    version: int = 1,
    approved_at: datetime | None = None,
    name: str | None = None,
) -> ArtifactDocument:
    kernel = kernel or KernelSpec(backend="triton", builtin="gemm_bf16")
    config = config if config is not None else {"BLOCK_M": 64, "BLOCK_N": 256, "num_warps": 8, "num_stages": 4}
    approved = approved_at or datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    return ArtifactDocument(
        version=version,
        supersedes=version - 1 if version > 1 else None,
        kernel=kernel_identity(kernel, name),
        target=target or H200,
        workload=[WorkloadShape(dims={"m": 4096, "n": 4096, "k": 4096})],
        controls=controls_for(kernel, config, arch="sm_90"),
        metrics=[metric(), metric("energy_mj", 0.97, 0.94, 1.01)],
        correctness=CorrectnessSummary(
            passed=True,
            shapes=[
                ShapeCorrectness(dims={"m": 4096, "n": 4096, "k": 4096}, passed=True, errors={"rel_l2_err": 0.0021}),
                ShapeCorrectness(dims={"m": 4095, "n": 4093, "k": 4091}, passed=True, errors={"rel_l2_err": 0.0023}),
            ],
        ),
        provenance=Provenance(
            study_id=7,
            trial_id=1234,
            trial_number=56,
            candidate_id=3,
            validation_id=2,
            worker_fingerprints=[
                {"hostname": "gpu-node-1", "gpu_name": "NVIDIA H200", "compilers": {"triton": "3.4.0"}}
            ],
            measurement_method="paretune-measure/1",
            promoted_by="alice",
            promoted_at=approved - timedelta(hours=2),
            validated_at=approved - timedelta(hours=1),
            approved_by="bob",
            approved_at=approved,
            service_version="0.1.0",
        ),
    )
