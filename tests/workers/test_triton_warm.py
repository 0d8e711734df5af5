"""A warm Triton runner keeps Triton's C glue modules across its jobs' caches
(workers.backends.triton_warm), through Triton's own cache-manager lookup; kernels stay per job.
What needs a GPU (the warm-up's compile and meta-device inputs) is marked `gpu` (skipped without one)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_gpu
from triton.runtime import build
from triton.runtime.cache import get_cache_manager, get_override_manager

from wire.contract import KernelSpec, WorkloadShape
from workers.backends import triton_warm
from workers.backends.triton_backend import TritonBackend

LAUNCHER = "__triton_launcher.cpython-312-x86_64-linux-gnu.so"
SOURCE = hashlib.sha256(b"a launcher's generated source").hexdigest()  # Triton keys by such a hash
OTHER = hashlib.sha256(b"another launcher's").hexdigest()


@pytest.fixture
def glue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The process keeps glue (as a warm runner's warm-up does); the environment comes back after."""
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "")  # empty: none named; restored after
    monkeypatch.setenv(triton_warm.STORE_ENV, "")
    monkeypatch.setattr(triton_warm.tempfile, "tempdir", str(tmp_path))
    assert triton_warm.keep_glue()
    assert triton_warm.os.environ["TRITON_CACHE_MANAGER"] == triton_warm.MANAGER
    return Path(triton_warm.os.environ[triton_warm.STORE_ENV])


def job_cache(monkeypatch: pytest.MonkeyPatch, path: Path) -> Path:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(path))
    return path


def test_a_launcher_built_in_one_job_is_found_in_the_next(glue: Path, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    first = job_cache(monkeypatch, tmp_path / "job1")
    manager = get_cache_manager(SOURCE)
    assert isinstance(manager, triton_warm.GlueCache)
    assert manager.get_file(LAUNCHER) is None
    manager.put(b"\x7fELF launcher", LAUNCHER, binary=True)
    manager.put(b"cubin of job 1", "kernel.cubin", binary=True)
    assert (first / manager.key / LAUNCHER).is_file()

    second = job_cache(monkeypatch, tmp_path / "job2")
    manager = get_cache_manager(SOURCE)
    found = manager.get_file(LAUNCHER)
    assert found == str(second / manager.key / LAUNCHER)  # copied into this job's cache: its build carries it
    assert Path(found).read_bytes() == b"\x7fELF launcher"
    assert manager.get_file("kernel.cubin") is None  # kernels stay per job
    assert get_cache_manager(OTHER).get_file(LAUNCHER) is None  # another source, another launcher


def test_without_the_warm_up_each_job_builds_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    job_cache(monkeypatch, tmp_path / "job1")
    get_cache_manager(SOURCE).put(b"\x7fELF", LAUNCHER, binary=True)
    job_cache(monkeypatch, tmp_path / "job2")
    assert get_cache_manager(SOURCE).get_file(LAUNCHER) is None


def test_override_and_dump_directories_are_left_alone(glue: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    job_cache(monkeypatch, tmp_path / "job1")
    get_cache_manager(SOURCE).put(b"\x7fELF", LAUNCHER, binary=True)
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(tmp_path / "override"))
    assert get_override_manager(SOURCE).get_file(LAUNCHER) is None


def test_a_host_cache_manager_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "site.cache:Remote")
    monkeypatch.delenv(triton_warm.STORE_ENV, raising=False)
    assert not triton_warm.keep_glue()
    assert triton_warm.os.environ["TRITON_CACHE_MANAGER"] == "site.cache:Remote"
    assert triton_warm.STORE_ENV not in triton_warm.os.environ


def test_a_failed_first_compile_leaves_each_job_its_own_glue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv(triton_warm.STORE_ENV, raising=False)

    def no_compiler() -> None:
        raise RuntimeError("Failed to find C compiler")

    monkeypatch.setattr(triton_warm, "first_compile", no_compiler)
    with pytest.raises(RuntimeError, match="C compiler"):  # the warm-up reports it
        triton_warm.warm()
    assert "TRITON_CACHE_MANAGER" not in triton_warm.os.environ
    assert triton_warm.STORE_ENV not in triton_warm.os.environ


@pytest.mark.gpu
@needs_gpu
def test_a_warm_runner_compiles_without_the_c_compiler_after_its_warm_up(
        glue: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    builds: list[str] = []
    original = build._build

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        builds.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(build, "_build", counted)
    triton_warm.warm()
    spec = KernelSpec(backend="triton", builtin="gemm_bf16",
                      workload=[WorkloadShape(dims={"m": 256, "n": 256, "k": 256})])
    backend = TritonBackend()
    tiles = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    # the third job builds the first one's configuration again, as a study of another shape would
    for job, config in enumerate([{}, tiles, {}]):
        cache = job_cache(monkeypatch, tmp_path / f"job{job}" / "build" / "triton-cache")
        builds.clear()
        backend.compile(spec, config, tmp_path / f"job{job}" / "build")
        assert list(cache.rglob("__triton_launcher*.so")), "the build carries its launcher to the run phase"
        assert list(cache.rglob("*.cubin")), "the build carries its kernel's binary to the run phase"
        if job:
            assert builds == [], "the launcher was built again"


@pytest.mark.gpu
@needs_gpu
def test_the_warm_up_makes_each_triton_builtins_inputs_and_forgets_their_modules() -> None:
    import sys

    before = set(sys.modules)
    assert triton_warm.meta_inputs() == ["gemm_bf16", "attention_fwd"]
    assert not {name for name in set(sys.modules) - before if name.startswith("paretune_warm_")}


@pytest.mark.gpu
@needs_gpu
def test_only_a_compile_runner_keeps_the_glue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv(triton_warm.STORE_ENV, raising=False)
    TritonBackend().warm_up("run")  # the GPU stack only: a run runner compiles nothing
    assert "TRITON_CACHE_MANAGER" not in triton_warm.os.environ
    TritonBackend().warm_up("compile")
    assert triton_warm.os.environ["TRITON_CACHE_MANAGER"] == triton_warm.MANAGER


def test_what_a_jit_function_compiled_before_is_forgotten_through_its_wrappers() -> None:
    from collections import defaultdict
    from types import SimpleNamespace

    from workers.backends.triton_kernel import forget_compiled

    caches: defaultdict[int, dict[str, str]] = defaultdict(dict)
    caches[0]["key"] = "a kernel compiled for an earlier job"
    jit = SimpleNamespace(device_caches=caches)
    forget_compiled(SimpleNamespace(fn=SimpleNamespace(fn=jit)))  # e.g. heuristics around autotune around it
    assert not caches
    forget_compiled(SimpleNamespace(fn=None))  # no JIT function: nothing to forget
