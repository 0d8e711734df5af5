"""The runtime module offline: loading and verifying directories and bundles, choosing the
artifact for this machine, the fallback warning, Triton configurations as plain arguments,
and a CPU kernel built and run with exactly the approved flags."""

from __future__ import annotations

import ctypes
import json
import subprocess
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from artifact_factory import H200, make_document
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wire.artifact import ArtifactVerificationError, VerificationFailure, sign
from wire.contract import KernelSpec
from wire.kernels import get_builtin
from workers.backends.cpu import flags_for
from workers.runtime import (
    ArtifactFallbackWarning,
    ArtifactStore,
    ArtifactToolchainWarning,
    EmbeddedKeyWarning,
    detect_target,
    read_artifacts,
    select,
    write_bundle,
    write_tar_bundle,
)
from workers.runtime import store as store_module


@pytest.fixture(autouse=True)
def fresh_warnings():
    store_module._warned.clear()  # "once per kernel" is per process: each test starts anew
    yield
    store_module._warned.clear()


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def pem(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def write(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return path


def gemm(key, version=1, **target) -> bytes:
    doc = make_document(
        version=version,
        target=H200.model_copy(update=target),
        config={"BLOCK_M": 64 * version, "num_warps": 8, "num_stages": 4, "enable_fp_fusion": False},
    )
    return sign(doc, key).file_bytes()


ON_H200 = {
    "gpu": "NVIDIA H200",
    "compute_capability": "9.0",
    "driver": "570.133.20",
    "cuda": "12.8",
    "triton": "3.4.0",
    "ptxas": "12.8",
}


def test_exact_match_gives_the_approved_triton_configuration(tmp_path: Path, key) -> None:
    write(tmp_path / "a", "gemm.json", gemm(key))
    store = ArtifactStore.load(tmp_path / "a", pem(key), target=ON_H200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact match warns about nothing
        selection = store.select("gemm_bf16")
        arguments = store.triton_config_arguments("gemm_bf16")
    assert selection.match is not None and selection.match.exact
    assert arguments == {"kwargs": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, "num_warps": 8, "num_stages": 4}
    assert store.launch_options("gemm_bf16") == {"enable_fp_fusion": False}
    assert store.config("gemm_bf16")["BLOCK_M"] == 64


def test_nearest_match_is_flagged_once(tmp_path: Path, key) -> None:
    write(tmp_path, "v1.json", gemm(key, 1, ptxas="12.4", triton="3.3.1"))
    write(tmp_path, "v2.json", gemm(key, 2, driver="560.35.03"))
    store = ArtifactStore.load(tmp_path, [pem(key)], target=ON_H200)
    with pytest.warns(ArtifactToolchainWarning, match="driver 560.35.03 here 570.133.20") as caught:
        first = store.select("gemm_bf16")
        store.select("gemm_bf16")
    assert len(caught) == 1
    assert first.match is not None and not first.match.exact
    assert first.document.version == 2  # a driver difference weighs less than two compilers
    assert first.match.differences == {"driver": ("560.35.03", "570.133.20")}


def test_no_match_falls_back_with_one_warning_per_kernel(tmp_path: Path, key) -> None:
    write(tmp_path, "gemm.json", gemm(key))
    store = ArtifactStore.load(
        tmp_path, pem(key), target={**ON_H200, "gpu": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}
    )
    default = [object()]
    with pytest.warns(ArtifactFallbackWarning) as caught:
        for _ in range(3):
            assert store.triton_configs("gemm_bf16", default) is default  # triton is not imported
            assert store.flags("rmsnorm", "nvcc", ["-O3"]) == ["-O3"]
    assert len(caught) == 2  # one for each kernel
    assert "NVIDIA A100-SXM4-80GB" in str(caught[0].message) and "NVIDIA H200" in str(caught[0].message)
    assert store.config("gemm_bf16", {"BLOCK_M": 128}) == {"BLOCK_M": 128}


def test_matching_rules() -> None:
    docs = [
        make_document(version=1, target=H200),
        make_document(version=3, target=H200.model_copy(update={"compute_capability": "9.1"})),
        make_document(version=2, target=H200, approved_at=datetime(2026, 12, 2, tzinfo=UTC)),
        make_document(version=5, target=H200, name="other_kernel"),
    ]
    here = H200.model_copy()
    best = select(docs, "gemm_bf16", here)
    assert best is not None and best.exact and best.document.version == 2 and best.others == 1
    assert select(docs, "gemm_bf16", here.model_copy(update={"compute_capability": None})) is None
    assert select(docs, "gemm_bf16", here, backend="cuda") is None
    unknown = select(docs, "gemm_bf16", here.model_copy(update={"ptxas": None}))
    assert unknown is not None and unknown.differences == {"ptxas": ("12.8", None)}


def test_bundles_json_and_tar(tmp_path: Path, key) -> None:
    one, two = gemm(key, 1), gemm(key, 2, ptxas="13.0")
    json_bundle = write(tmp_path, "bundle.json", write_bundle([one, two], pem(key)))
    tar_bundle = write(tmp_path, "bundle.tar", write_tar_bundle([("v1.json", one), ("v2.json", two)], pem(key)))
    for bundle in (json_bundle, tar_bundle):
        trusted = read_artifacts(bundle, pem(key))
        assert [a.document.version for a in trusted] == [1, 2]
        with pytest.warns(EmbeddedKeyWarning, match="intact, not that your service signed them"):
            embedded = read_artifacts(bundle)
        assert [a.sha256 for a in embedded] == [a.sha256 for a in trusted]
    with pytest.raises(ArtifactVerificationError) as caught:
        read_artifacts(json_bundle, pem(Ed25519PrivateKey.generate()))
    assert caught.value.reason is VerificationFailure.UNKNOWN_KEY and "bundle.json#0" in str(caught.value)


def test_a_tampered_file_in_a_directory_stops_loading(tmp_path: Path, key) -> None:
    write(tmp_path, "good.json", gemm(key, 1))
    bad = bytearray(gemm(key, 2))
    bad[bad.index(b'"BLOCK_M":128') + 10] = ord("9")
    write(tmp_path, "bad.json", bytes(bad))
    with pytest.raises(ArtifactVerificationError, match="bad.json") as caught:
        ArtifactStore.load(tmp_path, pem(key))
    assert caught.value.reason is VerificationFailure.CONTENT_CHANGED
    with pytest.raises(ValueError, match="no trusted public key"):
        read_artifacts(tmp_path / "good.json")
    tampered_bundle = json.loads(write_bundle([gemm(key, 1)], pem(key)))
    tampered_bundle["artifacts"][0]["document"]["controls"]["config"]["num_warps"] = 2
    write(tmp_path / "b", "bundle.json", json.dumps(tampered_bundle).encode())
    with pytest.warns(EmbeddedKeyWarning), pytest.raises(ArtifactVerificationError, match="changed after signing"):
        read_artifacts(tmp_path / "b")


def test_cuda_flags_with_the_acf_written_once(tmp_path: Path, key) -> None:
    kernel = KernelSpec(backend="cuda", builtin="rmsnorm", options={"acf_files": {"tight": "acf bytes\n"}})
    cuda_h200 = H200.model_copy(update={"triton": None, "nvrtc": "12.8"})
    config = {"THREADS": 512, "use_fast_math": True, "acf": "tight", "ptxas_options": "-O3"}
    doc = make_document(kernel=kernel, config=config, target=cuda_h200)
    write(tmp_path / "a", "rmsnorm.json", sign(doc, key).file_bytes())
    store = ArtifactStore.load(tmp_path / "a", pem(key), target=cuda_h200)
    flags = store.flags("rmsnorm", "nvcc", acf_dir=tmp_path / "acf")
    (acf_file,) = (tmp_path / "acf").iterdir()
    assert acf_file.read_bytes() == b"acf bytes\n"
    assert flags[:2] == ["--gpu-architecture=sm_90", "--std=c++17"]
    assert f"--ptxas-options=-O3,--apply-controls,{acf_file}" in flags
    assert "-DTHREADS=512" in flags and "-DVEC=2" in flags  # the built-in's default, as validated
    assert store.flags("rmsnorm", "nvrtc", acf_dir=tmp_path / "acf")[-1] == f"--ptxas-options={acf_file}"


def test_a_cpu_kernel_built_and_run_with_the_approved_flags(tmp_path: Path, key) -> None:
    """The runtime path a build takes: the approved cc flags of the built-in matmul for this
    very machine, a shared library built with them, and its result checked."""
    here = detect_target("cpu")
    approved = {
        "opt": "-O3",
        "unroll": True,
        "vectorize": True,
        "march_native": False,
        "inline_limit": 300,
        "TILE_M": 8,
        "TILE_N": 32,
        "TILE_K": 48,
    }
    doc = make_document(kernel=KernelSpec(backend="cpu", builtin="matmul"), config=approved, target=here)
    write(tmp_path / "a", "matmul.json", sign(doc, key).file_bytes())
    store = ArtifactStore.load(tmp_path / "a", pem(key))
    flags = store.flags("matmul", "cc")
    assert flags == flags_for(approved)  # exactly what the cpu backend compiled the candidate with
    assert {"-O3", "-funroll-loops", "-ftree-vectorize", "-DTILE_M=8", "-DTILE_N=32", "-DTILE_K=48"} <= set(flags)
    source = get_builtin("cpu", "matmul").read_source()
    (tmp_path / "matmul.c").write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", *flags, "-o", "libmatmul.so", "matmul.c"], cwd=tmp_path, check=True)
    library = ctypes.CDLL(str(tmp_path / "libmatmul.so"))
    m, n, k = 45, 70, 33
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), dtype=np.float32)
    pointer = ctypes.c_void_p
    library.matmul(
        ctypes.c_int(m),
        ctypes.c_int(n),
        ctypes.c_int(k),
        pointer(a.ctypes.data),
        pointer(b.ctypes.data),
        pointer(c.ctypes.data),
    )
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
