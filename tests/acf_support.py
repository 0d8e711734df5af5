"""What the compiler-controls tests share: the operator's CompileIQ search-space catalog
(NVIDIA's test data, beside the repository, never in it), the toolchains, ACFs the engine
generates, and the PTX of a built-in Triton kernel."""

from __future__ import annotations

import os
import pathlib
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CATALOG = REPO.parent / "shared" / "compileiq" / "search-spaces"
TOOLCHAINS = REPO / ".venv" / "toolchains"  # `./dev test` installs nvidia-cuda-nvcc 13.5.37 there
OTHER_RELEASE = "13.5.37"

needs_catalog = pytest.mark.skipif(not (CATALOG / "manifest.json").is_file(),
                                   reason=f"no CompileIQ search-space catalog at {CATALOG} (the operator's; "
                                   "see ../shared/compileiq/README.md)")


def ptxas_13_3() -> Path:
    from workers.compilers import toolchains

    toolchain = toolchains.selected()
    if toolchain is None or toolchain.release != "13.3":
        pytest.skip("no ptxas 13.3 here: install the acf extra (nvidia-cuda-nvcc==13.3.73)")
    return toolchain.ptxas


def ptxas_other() -> Path:
    """ptxas 13.5, which refuses 13.3 controls files."""
    path = TOOLCHAINS / f"nvidia-cuda-nvcc-{OTHER_RELEASE}" / "nvidia" / "cu13" / "bin" / "ptxas"
    if not path.is_file():
        pytest.skip(f"no ptxas {OTHER_RELEASE}: `paretune toolchain install {OTHER_RELEASE} --directory {TOOLCHAINS}`")
    return path


@cache
def engine_acfs(count: int = 6) -> tuple[bytes, ...]:
    """ACFs CompileIQ's engine generates from the catalog's ptxas 13.3 search space."""
    if not (CATALOG / "manifest.json").is_file():
        pytest.skip("no CompileIQ search-space catalog")
    from compileiq.ciq import Search
    from compileiq.types import SearchConfiguration, WorkerTypes

    os.environ.setdefault("CIQ_SEARCH_SPACES_DIR", str(CATALOG))
    search = Search(objective_function=_unused, search_space=pathlib.Path(CATALOG / "ptxas13.3.bin"),
                    search_config=SearchConfiguration(generations=1, pool_size=max(6, count)),
                    worker_type=WorkerTypes.MANUAL, disable_progress_bar=True)
    return tuple(bytes.fromhex(c.params) for c in search.ask()[:count])


def _unused(params: object) -> float:
    raise AssertionError("the tests evaluate candidates themselves")


def gemm_ptx(directory: Path, config: dict[str, int] | None = None) -> Path:
    """The PTX Triton lowers the built-in GEMM to for sm_90a at a small shape."""
    from wire.contract import KernelSpec
    from workers.backends.triton_backend import TritonBackend

    kernel = KernelSpec(backend="triton", builtin="gemm_bf16", options={"compute_capability": "9.0"},
                        workload=[{"dims": {"m": 256, "n": 256, "k": 256}}])
    built = TritonBackend().compile(kernel, config or {"BLOCK_M": 64, "BLOCK_N": 64}, directory, compile_only=True)
    return directory / f"{next(iter(built.report['shapes']))}.ptx"
