"""Fixtures for the worker tests: trial specs, a fresh artifact cache, planted kernels."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # worker_plane, worker_objectives

from wire.contract import KernelSpec, MeasureSettings, TrialSpec, WorkloadShape  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402

HERE = Path(__file__).parent


def gpu_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


needs_gpu = pytest.mark.skipif(not gpu_available(), reason="needs torch and a CUDA GPU")
FAST = MeasureSettings(warmup_s=0.005, min_repeats=5, max_repeats=40, target_s=0.03, hot_window_s=0.2)
_ids = itertools.count(1)

GOOD_MATMUL = """
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
"""
SEGFAULT = """
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    volatile float *far = C + ((long)1 << 40);  /* far outside any mapping */
    *far = 1.0f;
}
"""
HANG = """
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    volatile unsigned long spins = 0;
    for (;;) spins++;
}
"""
COMPILE_ERROR = """
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    this is not C;
}
"""
WRONG = """
void matmul(int M, int N, int K, const float *A, const float *B, float *C) {
    for (int i = 0; i < M * N; i++) C[i] = 1.0f;  /* not A @ B */
}
"""
PLANTED = {
    "segfault": SEGFAULT,
    "hang": HANG,
    "compile_error": COMPILE_ERROR,
    "wrong": WRONG,
    "good": GOOD_MATMUL,
}


def cpu_source_kernel(source: str, n: int = 48) -> KernelSpec:
    return KernelSpec(
        backend="cpu",
        source=source,
        entry="matmul",
        workload=[WorkloadShape(dims={"n": n})],
        options={"problem": "matmul"},
    )


def python_kernel(function: str) -> KernelSpec:
    """An objective of worker_objectives.py, sent as inline source (as a study would)."""
    return KernelSpec(backend="python", source=(HERE / "worker_objectives.py").read_text(), entry=function)


def make_spec(
    kernel: KernelSpec,
    config: dict[str, Any] | None = None,
    *,
    objectives: list[str] | None = None,
    compile_timeout_s: float = 60,
    run_timeout_s: float = 60,
    measure: MeasureSettings = FAST,
) -> TrialSpec:
    trial_id = next(_ids)
    return TrialSpec(
        trial_id=trial_id,
        study_id=1,
        number=trial_id,
        attempt=1,
        is_baseline=False,
        kernel=kernel,
        config=config or {},
        objectives=objectives or ["runtime_ms"],
        compile_timeout_s=compile_timeout_s,
        run_timeout_s=run_timeout_s,
        measure=measure,
    )


@pytest.fixture
def cache(tmp_path: Path) -> ArtifactCache:
    return ArtifactCache(tmp_path / "cache")


@pytest.fixture
def spec_factory() -> Callable[..., TrialSpec]:
    return make_spec


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False
