"""The cpu backend's flags, the built-in kernels and their spaces, RAPL reading, and the
fingerprint, with the real compiler."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST, make_spec
from pydantic import ValidationError

from wire.contract import FailureReason, KernelSpec, WorkloadShape
from wire.failures import TrialFailure
from wire.kernels import BUILTINS, BuiltinKernel, get_builtin, register
from wire.space import IntParam, value_problem
from workers.backends import get_backend, probe_backends
from workers.backends.cpu import flags_for
from workers.fingerprint import collect
from workers.measure import rapl
from workers.sandbox.context import Context
from workers.sandbox.stages import execute_trial


def test_flags_for_a_configuration():
    flags = flags_for(
        {
            "opt": "-O3",
            "march_native": True,
            "unroll": True,
            "vectorize": False,
            "fast_math": True,
            "inline_limit": 300,
            "TILE_M": 32,
            "USE_X": True,
        }
    )
    assert flags == [
        "-DTILE_M=32",
        "-DUSE_X=1",
        "-ffast-math",
        "-finline-limit=300",
        "-march=native",
        "-mtune=native",
        "-O3",
        "-funroll-loops",
        "-fno-tree-vectorize",
    ]
    assert flags_for({"opt": "O2"}) == ["-O2"]


@pytest.mark.parametrize("config", [{"opt": "-O9"}, {"tile": 3}])
def test_bad_configuration_keys_are_explained(config):
    with pytest.raises(TrialFailure) as caught:
        flags_for(config)
    assert caught.value.reason == FailureReason.ERROR


@pytest.mark.parametrize("name", ["matmul", "stencil"])
def test_builtin_defaults_are_inside_their_spaces(name):
    kernel = get_builtin("cpu", name)
    assert kernel is not None and kernel.backend == "cpu"
    assert all(value_problem(p, kernel.default_config[p.name]) is None for p in kernel.space)
    assert kernel.read_source().count(kernel.entry) >= 1
    assert kernel.workload and all("dims" in w for w in kernel.workload)
    assert len(kernel.space) >= 6


def declared(default_config, space):
    return BuiltinKernel(name="bad", backend="cpu", source_file=None, entry=None, default_config=default_config,
                         space=space, workload=[], description="")


def test_space_defaults_are_the_baseline():
    space = [IntParam(name="T", type="int", low=4, high=8, step=4, default=8)]
    with pytest.raises(ValueError, match=r"the space's default T=8 is not the baseline's 4"):
        declared({"T": 4}, space)
    assert declared({"T": 8}, space).default_config == {"T": 8}


@pytest.mark.parametrize(("default_config", "space", "problem"), [
    ({"T": 3}, [IntParam(name="T", type="int", low=4, high=8, step=4)], r"baseline's T: 3 is not in \[4, 8\] step 4"),
    ({}, [IntParam(name="T", type="int", low=4, high=8, step=4)], "the baseline has no value for T"),
    ({"T": 4, "U": 1}, [IntParam(name="T", type="int", low=4, high=8, step=4)], "the baseline names U"),
    ({"T": 4}, [IntParam(name="T", type="int", low=4, high=8), IntParam(name="T", type="int", low=4, high=8)],
     "repeated: T"),
])
def test_a_builtin_whose_baseline_is_not_a_point_of_its_space_is_refused(default_config, space, problem):
    with pytest.raises(ValueError, match=problem):
        register(declared(default_config, space))
    assert ("cpu", "bad") not in BUILTINS


def test_a_builtin_space_is_checked_by_the_study_document_s_models():
    with pytest.raises(ValidationError, match=r"low \(8\) must not be greater than high \(4\)"):
        IntParam(name="T", type="int", low=8, high=4)
    with pytest.raises(ValidationError, match=r"high - low \(6\) must be a multiple of step \(4\)"):
        IntParam(name="T", type="int", low=2, high=8, step=4)


@pytest.mark.parametrize("name,dims", [("matmul", {"n": 64}), ("stencil", {"n": 96, "m": 80, "steps": 3})])
def test_builtins_pass_their_check_at_the_extremes_of_the_space(cache, name, dims):
    builtin = get_builtin("cpu", name)
    lowest = {p.name: p.low for p in builtin.space if isinstance(p, IntParam)}
    kernel = KernelSpec(backend="cpu", builtin=name, workload=[WorkloadShape(dims=dims)])
    for config in (
        builtin.default_config,
        {**builtin.default_config, **lowest, "opt": "-Ofast", "unroll": True, "march_native": True},
    ):
        result = execute_trial(make_spec(kernel, config, objectives=["runtime_ms", "gflops"]), Context(cache))
        assert result.status == "completed", result.message + result.log
        assert result.correctness["passed"]
        assert result.metrics["gflops"].value > 0


def test_workload_mix_is_weighted(cache):
    kernel = KernelSpec(
        backend="cpu",
        builtin="matmul",
        workload=[WorkloadShape(dims={"n": 32}, weight=3), WorkloadShape(dims={"m": 16, "n": 64, "k": 48}, weight=1)],
    )
    config = get_builtin("cpu", "matmul").default_config
    result = execute_trial(make_spec(kernel, config, objectives=["runtime_ms", "latency_ms"]), Context(cache))
    assert result.status == "completed", result.message + result.log
    shapes = result.environment["shapes"]
    assert [s["weight"] for s in shapes] == [3, 1]
    mix = (3 * shapes[0]["hot_ms"] + shapes[1]["hot_ms"]) / 4
    assert result.metrics["runtime_ms"].value == pytest.approx(mix, rel=0.5)
    assert result.metrics["latency_ms"].n >= FAST.min_repeats


def test_energy_is_never_invented(cache):
    kernel = KernelSpec(backend="cpu", builtin="matmul", workload=[WorkloadShape(dims={"n": 32})])
    spec = make_spec(kernel, {}, objectives=["runtime_ms", "energy_mj"])
    result = execute_trial(spec, Context(cache))
    if rapl.available():
        assert result.status == "completed"
        assert result.metrics["energy_mj"].value > 0
    else:
        assert result.failure_reason == FailureReason.UNSUPPORTED
        assert "RAPL" in result.message
        assert get_backend("cpu").probe()["energy"] is False


def test_unknown_builtin_is_unsupported(cache):
    spec = make_spec(KernelSpec(backend="cpu", builtin="nope"), {})
    assert execute_trial(spec, Context(cache)).failure_reason == FailureReason.UNSUPPORTED


def test_rapl_reads_package_zones_and_handles_wrap(tmp_path: Path):
    for zone, energy in (("intel-rapl:0", 999_000), ("intel-rapl:1", 5_000)):
        d = tmp_path / zone
        d.mkdir()
        (d / "energy_uj").write_text(f"{energy}\n")
        (d / "max_energy_range_uj").write_text("1000000\n")
        (d / "name").write_text(f"package-{zone[-1]}\n")
    sub = tmp_path / "intel-rapl:0:0"  # a core sub-zone: already inside package 0
    sub.mkdir()
    (sub / "energy_uj").write_text("1\n")
    assert rapl.available(tmp_path)
    meter = rapl.EnergyMeter(tmp_path)
    assert [z.name for z in meter.zones] == ["package-0", "package-1"]
    _, before = meter.read()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("1000\n")  # wrapped past 1e6
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("7000\n")
    _, after = meter.read()
    assert meter.joules_between(before, after) == pytest.approx((2_000 + 2_000) / 1e6)
    assert not rapl.available(tmp_path / "missing")


def test_unreadable_rapl_means_no_energy(tmp_path: Path):
    d = tmp_path / "intel-rapl:0"
    d.mkdir()
    (d / "max_energy_range_uj").write_text("1000\n")  # energy_uj missing (as if root-only)
    assert not rapl.available(tmp_path)


def test_probe_and_fingerprint():
    probes = probe_backends()
    assert probes["cpu"]["available"] and probes["python"]["available"]
    for gpu in ("triton", "cuda"):
        assert "available" in probes[gpu]  # absent GPU stacks are reported, never raised
    fingerprint = collect(probes)
    assert "cpu" in fingerprint.backends and "python" in fingerprint.backends
    assert fingerprint.cpu_count >= 1 and fingerprint.cpu_model
    assert fingerprint.compilers["cc"]
    assert fingerprint.energy == rapl.available()


def test_stencil_regression_buffers_outlive_the_case(cache):
    # the scratch grid was once referenced only through a raw pointer: numpy freed it and the
    # kernel wrote into freed memory (SIGSEGV/SIGABRT in a later numpy call)
    config = {**get_builtin("cpu", "stencil").default_config, "TILE_I": 28, "TILE_J": 1088}
    kernel = KernelSpec(backend="cpu", builtin="stencil", workload=[WorkloadShape(dims={"n": 96, "m": 80, "steps": 3})])
    result = execute_trial(make_spec(kernel, config), Context(cache))
    assert result.status == "completed", result.message + result.log


@pytest.mark.parametrize("name", ["matmul", "stencil"])
def test_every_pointer_argument_is_kept_alive(name):
    import ctypes

    import numpy as np

    from workers.backends.cpu_problems import get_problem

    problem = get_problem(name)
    dims = problem.shape(problem.edge_shapes()[0])
    seen: list[int] = []

    def fake(*args):
        seen.extend(a.value for a in args if isinstance(a, ctypes.c_void_p))

    class Recorder:
        argtypes = restype = None

        def __call__(self, *args):
            fake(*args)

    case = problem.case(Recorder(), dims, np.random.default_rng(0))
    case.call()
    assert sorted(seen) == sorted(b.ctypes.data for b in case.buffers)


@pytest.mark.parametrize("name", ["matmul", "stencil", "rmsnorm", "swiglu"])
def test_every_buffer_starts_on_a_cache_line_and_holds_the_problems_values(name):
    """numpy aligns to 16 bytes: a vectorised kernel ran at one speed or twice it as its
    fresh buffers fell, which was most of a cpu sweep's noise."""
    import ctypes

    import numpy as np

    from workers.backends.cpu_problems import ALIGNMENT, get_problem

    problem = get_problem(name)
    seen: list[int] = []

    class Recorder:
        argtypes = restype = None

        def __call__(self, *args):
            seen.extend(a.value for a in args if isinstance(a, ctypes.c_void_p))

    rng = np.random.default_rng(0)
    for dims in [problem.shape(d) for d in problem.edge_shapes()] * 4:
        spacer = np.empty(3, dtype=np.float32)  # shifts where the next allocation falls
        case = problem.case(Recorder(), dims, rng)
        del spacer
        case.call()
        inputs = [b for b in case.buffers if b is not case.output]
        assert all(b.flags.c_contiguous for b in case.buffers)
        assert all(np.isfinite(b).all() for b in inputs)
        assert np.isnan(case.output).all()  # the kernel must write every element
    assert len(seen) >= 12 and all(address % ALIGNMENT == 0 for address in seen), [a % ALIGNMENT for a in seen]
