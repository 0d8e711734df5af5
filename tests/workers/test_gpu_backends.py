"""The Triton and CUDA backends. Configuration handling, built-in resolution, cache keys and
the ACF refusal run everywhere; compile/check/measure on the built-in kernels need a GPU and
are marked `gpu` (skipped without one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import needs_gpu

from wire.contract import FailureReason, KernelSpec, MeasureSettings, WorkloadShape
from wire.failures import TrialFailure
from wire.kernels import get_builtin
from wire.space import CategoricalParam, value_problem
from workers.backends.cuda_backend import CudaBackend, program_settings, variant_id
from workers.backends.gpu_loader import resolve, shape_key
from workers.backends.triton_backend import TritonBackend
from workers.backends.triton_kernel import compile_options, meta_parameters
from workers.measure.gpu_harness import ACTIVITY, BUSY_WARMUP_S, IDLE_GAP_S, MIN_WARMUP_S

FAST = MeasureSettings(warmup_s=0.02, min_repeats=20, max_repeats=400, target_s=0.05, hot_window_s=0.3)


class TestBuiltins:
    @pytest.mark.parametrize(
        ("backend", "name"), [("triton", "gemm_bf16"), ("triton", "attention_fwd"), ("cuda", "rmsnorm")]
    )
    def test_registered_with_a_valid_default(self, backend: str, name: str) -> None:
        kernel = get_builtin(backend, name)
        assert kernel is not None
        assert all(value_problem(p, kernel.default_config[p.name]) is None for p in kernel.space)
        assert kernel.source_path() is not None and kernel.source_path().exists()
        assert kernel.workload

    def test_gemm_space_is_small_enough_to_sweep(self) -> None:
        kernel = get_builtin("triton", "gemm_bf16")
        assert kernel is not None
        size = 1
        for param in kernel.space:
            assert isinstance(param, CategoricalParam)
            size *= len(param.choices)
        assert 200 <= size <= 300  # a study of 60 trials is at most a quarter of it

    def test_resolve_merges_defaults_options_and_workload(self) -> None:
        spec = KernelSpec(backend="triton", builtin="gemm_bf16")
        resolved = resolve(spec, {"BLOCK_M": 64}, "triton")
        assert resolved.config["BLOCK_M"] == 64
        assert resolved.config["BLOCK_N"] == 128  # from the default configuration
        assert resolved.options["constants"] == {"GROUP_M": 8}
        assert resolved.workload[0].dims == {"m": 4096, "n": 4096, "k": 4096}
        assert "matmul_kernel" in resolved.source

    def test_unknown_builtin_is_unsupported(self) -> None:
        with pytest.raises(TrialFailure) as failure:
            resolve(KernelSpec(backend="triton", builtin="nope"), {}, "triton")
        assert failure.value.reason == FailureReason.UNSUPPORTED

    def test_source_without_workload_is_refused(self) -> None:
        with pytest.raises(TrialFailure, match="workload"):
            resolve(KernelSpec(backend="triton", source="x", entry="k"), {}, "triton")

    def test_shape_key(self) -> None:
        assert shape_key({"m": 64, "n": 8192}) == "m64_n8192"


class TestTritonConfiguration:
    def test_compile_options_and_meta_parameters_are_split(self) -> None:
        config = {
            "BLOCK_M": 128,
            "num_warps": 8,
            "num_stages": 3,
            "maxnreg": 0,
            "enable_fp_fusion": False,
            "ptx_options": "-O2",
            "acf": "none",
        }
        assert compile_options(config, []) == {
            "num_warps": 8,
            "num_stages": 3,
            "enable_fp_fusion": False,
            "ptx_options": "-O2",
        }
        with_acf = compile_options(config, ["--apply-controls", "/tmp/a.acf"])
        assert with_acf["ptx_options"] == "-O2 --apply-controls /tmp/a.acf"
        spec = KernelSpec(backend="triton", builtin="gemm_bf16")
        resolved = resolve(spec, config, "triton")
        assert meta_parameters(resolved, None, {}) == {"GROUP_M": 8, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}

    def test_cache_key_follows_config_and_shapes(self) -> None:
        backend = TritonBackend()
        spec = KernelSpec(backend="triton", builtin="gemm_bf16")
        key = backend.cache_key(spec, {"BLOCK_M": 64})
        assert key == backend.cache_key(spec, {"BLOCK_M": 64})
        assert key != backend.cache_key(spec, {"BLOCK_M": 128})
        other = spec.model_copy(update={"workload": [WorkloadShape(dims={"m": 64, "n": 64, "k": 64})]})
        assert key != backend.cache_key(other, {"BLOCK_M": 64})

    def test_acf_without_ptxas_13_3_is_refused_before_compiling(self, tmp_path: Path) -> None:
        from workers.backends.triton_kernel import triton_ptxas
        from workers.measure.gpu_toolchain import supports_acf

        if supports_acf(triton_ptxas()[1]):
            pytest.skip("this machine's ptxas applies ACFs")
        spec = KernelSpec(backend="triton", builtin="gemm_bf16", options={"acf_files": {"tuned": "controls"}})
        with pytest.raises(TrialFailure) as refused:
            TritonBackend().compile(spec, {"acf": "tuned"}, tmp_path)
        assert refused.value.reason == FailureReason.UNSUPPORTED
        assert "--apply-controls" in refused.value.message


class TestCudaConfiguration:
    def test_program_settings(self) -> None:
        config = {
            "THREADS": 256,
            "use_fast_math": True,
            "max_register_count": 0,
            "ptxas_options": "-O3 --warn-on-spills",
            "acf": None,
        }
        assert program_settings(config, []) == {
            "use_fast_math": True,
            "ptxas_options": ["-v", "-O3", "--warn-on-spills"],
        }
        assert program_settings({"max_register_count": 64}, ["--apply-controls", "a"]) == {
            "max_register_count": 64,
            "ptxas_options": ["-v", "--apply-controls", "a"],
        }

    def test_variant_id_depends_on_macros_only(self) -> None:
        assert variant_id({"COLS": "8192", "VEC": "8"}) == variant_id({"VEC": "8", "COLS": "8192"})
        assert variant_id({"COLS": "8192"}) != variant_id({"COLS": "4096"})

    def test_acf_refused_on_old_nvrtc(self, tmp_path: Path) -> None:
        from workers.backends.cuda_backend import nvrtc_version
        from workers.measure.gpu_toolchain import supports_acf

        if supports_acf(nvrtc_version()):
            pytest.skip("this machine's NVRTC applies ACFs")
        spec = KernelSpec(backend="cuda", builtin="rmsnorm", options={"acf_files": {"tuned": "controls"}})
        with pytest.raises(TrialFailure) as refused:
            CudaBackend().compile(spec, {"acf": "tuned"}, tmp_path)
        assert refused.value.reason == FailureReason.UNSUPPORTED


# --- on a GPU ------------------------------------------------------------------------------

SMALL: dict[str, list[dict[str, Any]]] = {
    "gemm_bf16": [{"dims": {"m": 512, "n": 512, "k": 512}}],
    "attention_fwd": [{"dims": {"batch": 1, "heads": 2, "seq": 256, "head_dim": 64, "causal": 1}}],
    "rmsnorm": [
        {"dims": {"rows": 256, "cols": 1024}, "weight": 2.0},
        {"dims": {"rows": 64, "cols": 4096}, "weight": 1.0},
    ],
}


def small_spec(backend: str, name: str, **update: Any) -> KernelSpec:
    shapes = [WorkloadShape(**w) for w in SMALL[name]]
    return KernelSpec(backend=backend, builtin=name, workload=shapes, **update)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("backend_cls", "name"),
    [(TritonBackend, "gemm_bf16"), (TritonBackend, "attention_fwd"), (CudaBackend, "rmsnorm")],
)
def test_builtin_compiles_checks_and_measures(backend_cls: type, name: str, tmp_path: Path) -> None:
    backend = backend_cls()
    assert backend.probe()["available"]
    spec = small_spec(backend.name, name)
    built = backend.compile(spec, {}, tmp_path)
    outcome = backend.check(spec, {}, built)
    assert outcome.passed, outcome.details
    objectives = ["runtime_ms", "energy_mj", "power_w", "latency_ms", "p99_ms"]
    metrics, environment = backend.measure(spec, {}, built, objectives, FAST)
    assert metrics["runtime_ms"].value > 0
    assert metrics["p99_ms"].value >= metrics["latency_ms"].value
    assert metrics["p99_ms"].n >= 300 * len(spec.workload)
    assert "shapes" in environment and "device" in environment
    if "energy_mj" in metrics:
        assert metrics["power_w"].value > 0


@pytest.mark.gpu
@needs_gpu
def test_warm_up_floor_is_kept_after_an_idle_gap_only(tmp_path: Path) -> None:
    backend = TritonBackend()
    spec = small_spec("triton", "gemm_bf16")
    built = backend.compile(spec, {}, tmp_path)
    settings = FAST.model_copy(update={"warmup_s": 0.0})
    ACTIVITY.ended = None  # as in a process that has not measured yet

    def warmups() -> list[float]:
        _, environment = backend.measure(spec, {}, built, ["runtime_ms"], settings)
        return [shape["hot"]["warmup_s"] for shape in environment["shapes"].values()]

    assert warmups() == [MIN_WARMUP_S]
    assert warmups() == [BUSY_WARMUP_S]  # right after the first: the GPU is still busy
    ACTIVITY.ended -= IDLE_GAP_S  # type: ignore[operator]
    assert warmups() == [MIN_WARMUP_S]


@pytest.mark.gpu
@needs_gpu
def test_planted_wrong_gemm_is_caught(tmp_path: Path) -> None:
    source = get_builtin("triton", "gemm_bf16").read_source()  # type: ignore[union-attr]
    planted = source.replace("tl.cdiv(K, BLOCK_K))", "tl.cdiv(K, BLOCK_K) - 1)")
    assert planted != source
    spec = small_spec("triton", "gemm_bf16", source=planted)
    backend = TritonBackend()
    built = backend.compile(spec, {}, tmp_path)
    outcome = backend.check(spec, {}, built)
    assert not outcome.passed
    assert outcome.details["max_rel_l2_err"] > outcome.details["tolerance"]


@pytest.mark.gpu
@needs_gpu
def test_planted_unwritten_rmsnorm_tail_is_caught(tmp_path: Path) -> None:
    source = get_builtin("cuda", "rmsnorm").read_source()  # type: ignore[union-attr]
    planted = source.replace(
        "idx < VECS_PER_ROW) {\n#if CACHE_ROW\n            const",
        "idx < VECS_PER_ROW - 1) {\n#if CACHE_ROW\n            const",
    )
    assert planted != source
    spec = small_spec("cuda", "rmsnorm", source=planted)
    backend = CudaBackend()
    built = backend.compile(spec, {}, tmp_path)
    outcome = backend.check(spec, {}, built)
    assert not outcome.passed
    assert any(s["unwritten"] > 0 for s in outcome.details["shapes"].values())
