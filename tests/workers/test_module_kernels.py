"""Kernels given by `module: package.path:function`, through the real sandbox: an installed
package's kernel is compiled, checked against the reference and measured like a built-in, its
baseline being the library's own settings; a wrong one fails the correctness gate, a worker
without the package says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_spec
from stand_ins import install_minikern, use_site

from wire.contract import FailureReason, KernelSpec, WorkloadShape
from workers.backends.cpu_problems import get_problem
from workers.sandbox.context import Context
from workers.sandbox.stages import execute_trial

RMS = "minikern.ops.rms_norm:_rms_norm_forward_kernel"


@pytest.fixture(scope="module")
def minikern_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_minikern(tmp_path_factory.mktemp("site"))


@pytest.fixture
def installed(minikern_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    use_site(monkeypatch, minikern_site)
    return minikern_site


def module_kernel(target: str, problem: str, cols: int) -> KernelSpec:
    return KernelSpec(backend="cpu", entry=target, options={"problem": problem},
                      workload=[WorkloadShape(dims={"rows": 4, "cols": cols}, weight=3),
                                WorkloadShape(dims={"rows": 16, "cols": cols}, weight=1)])


def test_a_module_kernel_runs_with_the_librarys_own_settings_as_baseline(installed: Path, cache) -> None:
    from minikern.ops.utils import calculate_settings

    block, warps = calculate_settings(1000)
    assert (block, warps) == (1024, 4)
    spec = make_spec(module_kernel(RMS, "rmsnorm", 1000), {"BLOCK_SIZE": block, "NUM_WARPS": warps},
                     objectives=["runtime_ms"])
    result = execute_trial(spec, Context(cache))
    assert result.status == "completed", result.message + result.log
    assert result.correctness["passed"] and result.correctness["rel_err"] < 1e-5
    # the workload's shapes and the edge shape the problem adds, all checked
    assert [s["dims"] for s in result.correctness["shapes"]] == [{"rows": 4, "cols": 1000},
                                                                 {"rows": 16, "cols": 1000}, {"rows": 3, "cols": 37}]
    assert result.compile_report["module"] == RMS and result.compile_report["package"] == "minikern 0.3.1"
    assert "-DBLOCK_SIZE=1024" in result.compile_report["flags"]
    assert [s["weight"] for s in result.environment["shapes"]] == [3, 1]


def test_another_configuration_of_the_same_kernel(installed: Path, cache) -> None:
    kernel = module_kernel("minikern.ops.swiglu:_swiglu_forward_kernel", "swiglu", 300)
    result = execute_trial(make_spec(kernel, {"BLOCK_SIZE": 64, "NUM_WARPS": 2}), Context(cache))
    assert result.status == "completed", result.message + result.log
    assert result.compile_report["entry"] == "swiglu_forward"
    assert "-DBLOCK_SIZE=64" in result.compile_report["flags"]


def test_a_wrong_module_kernel_fails_the_correctness_gate(installed: Path, cache) -> None:
    kernel = module_kernel("minikern.ops.rms_norm:_rms_norm_unweighted_kernel", "rmsnorm", 256)
    result = execute_trial(make_spec(kernel, {"BLOCK_SIZE": 256, "NUM_WARPS": 4}), Context(cache))
    assert result.status == "failed" and result.failure_reason == FailureReason.WRONG_RESULT, result.message
    assert result.correctness["passed"] is False


def test_a_worker_without_the_package_says_which(cache) -> None:
    kernel = module_kernel("liger_kernel_absent.ops.rms_norm:_rms_norm_forward_kernel", "rmsnorm", 64)
    result = execute_trial(make_spec(kernel, {"BLOCK_SIZE": 64}), Context(cache))
    assert result.failure_reason == FailureReason.UNSUPPORTED, result.message
    assert "no package 'liger_kernel_absent' installed" in result.message
    missing = execute_trial(make_spec(module_kernel("minikern.ops.rms_norm:nothing_here", "rmsnorm", 64), {}),
                            Context(cache))
    assert missing.failure_reason in (FailureReason.COMPILE_ERROR, FailureReason.UNSUPPORTED)


def test_the_stand_in_problems_reference_is_the_formula() -> None:
    """rmsnorm's and swiglu's references against values computed by hand."""
    class Recorder:
        argtypes: list = []
        restype = None

        def __call__(self, *args: object) -> None:
            return None

    rng = np.random.default_rng(0)
    case = get_problem("rmsnorm").case(Recorder(), {"rows": 1, "cols": 2}, rng)
    x, w = case.buffers[0][0].astype(np.float64), case.buffers[1].astype(np.float64)
    rms = np.sqrt((x[0] ** 2 + x[1] ** 2) / 2 + 1e-6)
    np.testing.assert_allclose(case.reference()[0], [x[0] / rms * w[0], x[1] / rms * w[1]], rtol=1e-12)
    case = get_problem("swiglu").case(Recorder(), {"rows": 1, "cols": 1}, rng)
    a, b = float(case.buffers[0][0, 0]), float(case.buffers[1][0, 0])
    assert case.reference()[0, 0] == pytest.approx(a / (1 + np.exp(-a)) * b, rel=1e-12)


def test_a_triton_module_kernel_resolves_to_the_packages_function_and_its_harness(installed: Path) -> None:
    """What the triton backend runs of a module kernel (Triton itself runs on the GPU job)."""
    from minikern.ops.rms_norm import _rms_norm_forward_kernel

    from workers.backends.gpu_loader import resolve
    from workers.backends.triton_kernel import jit_of

    harness = "DTYPE = 'float32'\ndef grid(dims, meta):\n    return (dims['rows'],)\n"
    kernel = KernelSpec(backend="triton", entry=RMS, options={"harness_source": harness},
                        workload=[WorkloadShape(dims={"rows": 2, "cols": 8})])
    resolved = resolve(kernel, {"BLOCK_SIZE": 8}, "triton")
    assert (resolved.source, resolved.entry, resolved.name) == (harness, RMS, RMS)
    assert jit_of(None, resolved) is _rms_norm_forward_kernel  # type: ignore[arg-type]
    named = resolve(kernel.model_copy(update={"options": {"harness": "minikern.ops.utils"}}), {}, "triton")
    assert "def calculate_settings" in named.source
    with pytest.raises(Exception, match="needs its harness"):
        resolve(kernel.model_copy(update={"options": {}}), {}, "triton")


def test_per_token_objectives_follow_from_the_measured_ones(installed: Path, cache) -> None:
    """time_per_token_us = 1000 runtime_ms / m, m the weighted mean of the token dim: (3 x 4 + 16) / 4 = 7 rows."""
    kernel = module_kernel(RMS, "rmsnorm", 512).model_copy(update={"options": {"problem": "rmsnorm",
                                                                                "token_dim": "rows"}})
    spec = make_spec(kernel, {"BLOCK_SIZE": 512, "NUM_WARPS": 4}, objectives=["time_per_token_us", "runtime_ms"])
    result = execute_trial(spec, Context(cache))
    assert result.status == "completed", result.message + result.log
    runtime, per_token = result.metrics["runtime_ms"], result.metrics["time_per_token_us"]
    assert per_token.value == pytest.approx(1000 * runtime.value / 7, rel=1e-12) and per_token.unit == "us"
    assert per_token.ci_low == pytest.approx(1000 * runtime.ci_low / 7, rel=1e-12)
    assert per_token.stats["max"] == pytest.approx(1000 * runtime.stats["max"] / 7, rel=1e-12)


def test_the_run_phase_loads_a_harness_its_build_directory_cannot_take(tmp_path: Path) -> None:
    """The run sandbox reads a build the compile sandbox's user made: where the harness file
    is not there and cannot be written, it is loaded from a private directory, not a failure."""
    from workers.backends.gpu_loader import load_module

    not_a_directory = tmp_path / "build"
    not_a_directory.write_text("a file where the build's src/ would be")
    module = load_module("VALUE = 41 + 1\n", not_a_directory / "src", "harness")
    assert module.VALUE == 42 and not str(module.__file__).startswith(str(tmp_path))
    # a build that holds the file: loaded from there, not written again
    built = tmp_path / "built" / "src"
    built.mkdir(parents=True)
    first = load_module("VALUE = 7\n", built, "harness")
    assert Path(str(first.__file__)).parent == built
