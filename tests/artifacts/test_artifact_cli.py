"""`paretune artifact verify|flags|bundle` as a build script runs them, including on a
worker-only install (no service extras importable)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from artifact_factory import make_document
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from service.cli import app
from wire.artifact import sign
from wire.contract import KernelSpec
from workers.runtime import ArtifactStore, EmbeddedKeyWarning

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def files(tmp_path: Path, key: Ed25519PrivateKey) -> dict[str, Path]:
    public = tmp_path / "paretune-public.pem"
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    cuda = KernelSpec(backend="cuda", builtin="rmsnorm", options={"acf_files": {"tight": "acf\n"}})
    config = {"THREADS": 1024, "VEC": 8, "use_fast_math": True, "max_register_count": 64, "acf": "tight"}
    artifacts = {
        "cuda": sign(make_document(kernel=cuda, config=config), key).file_bytes(),
        "triton": sign(make_document(), key).file_bytes(),
        "cpu": sign(make_document(kernel=KernelSpec(backend="cpu", builtin="matmul"), config={"opt": "-O3"}), key)
        .file_bytes(),
    }
    paths = {"public": public}
    for name, data in artifacts.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_bytes(data)
    return paths


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["artifact", *args])
    return result.exit_code, result.stdout, result.stderr


def test_verify(files: dict[str, Path]) -> None:
    code, out, _ = run("verify", str(files["triton"]), "--public-key", str(files["public"]))
    assert code == 0, out
    assert out.startswith(f"OK {files['triton']}: sha256 ")
    assert "gemm_bf16 (triton) v1 for gpu NVIDIA H200, compute_capability 9.0" in out
    assert "runtime_ms x1.250" in out and "energy_mj x1.031 (not significant)" in out
    code, out, _ = run("verify", str(files["triton"]), "--public-key", str(files["public"]), "--show")
    assert code == 0 and json.loads(out)["kernel"]["name"] == "gemm_bf16"


def test_verify_failures(files: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(files["cuda"].read_bytes())
    data[data.index(b'"THREADS":1024') + 10] = ord("2")
    files["cuda"].write_bytes(bytes(data))
    code, _, err = run("verify", str(files["cuda"]), "--public-key", str(files["public"]))
    assert code == 2 and "content_changed" in err and "changed after signing" in err
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    code, _, err = run("verify", str(files["triton"]), "--public-key", str(stranger))
    assert code == 2 and "unknown_key" in err
    code, _, err = run("verify", str(files["triton"]))
    assert code == 1 and "--public-key" in err


def test_flags_line_and_json(files: dict[str, Path]) -> None:
    code, out, err = run("flags", str(files["cuda"]), "--public-key", str(files["public"]))
    assert code == 0, err
    flags = shlex.split(out)
    acf = next(files["cuda"].parent.glob("*-tight.acf"))
    assert acf.read_bytes() == b"acf\n"
    assert flags == [
        "--gpu-architecture=sm_90",
        "--std=c++17",
        "--use_fast_math",
        "--maxrregcount=64",
        "-DTHREADS=1024",
        "-DROWS_PER_CTA=1",
        "-DVEC=8",
        "-DCACHE_ROW=0",
        f"--ptxas-options=--apply-controls,{acf}",
    ]
    code, out, _ = run("flags", str(files["cuda"]), "--tool", "ptxas", "--public-key", str(files["public"]))
    assert shlex.split(out) == ["--apply-controls", str(acf)]
    code, out, _ = run("flags", str(files["cuda"]), "--format", "json", "--public-key", str(files["public"]))
    body = json.loads(out)
    assert set(body["flags"]) == {"nvcc", "nvrtc", "ptxas"}
    assert body["acf"]["path"] == str(acf) and body["defines"]["THREADS"] == 1024 and body["arch"] == "sm_90"
    code, out, err = run("flags", str(files["cpu"]))
    assert code == 0 and out.strip() == "-O3" and "signature not checked" in err
    code, _, err = run("flags", str(files["cuda"]), "--tool", "gcc")
    assert code == 1 and "--tool must be one of" in err


def test_bundle_for_the_runtime(files: dict[str, Path], tmp_path: Path) -> None:
    for name in ("bundle.json", "bundle.tar"):
        out_path = tmp_path / name
        code, out, err = run(
            "bundle", str(files["triton"]), str(files["cpu"]), "-o", str(out_path), "--public-key", str(files["public"])
        )
        assert code == 0, err
        with pytest.warns(EmbeddedKeyWarning):
            store = ArtifactStore.load(out_path)
        assert sorted(a.document.kernel.name for a in store.artifacts) == ["gemm_bf16", "matmul"]


def test_commands_work_on_a_worker_only_install(files: dict[str, Path]) -> None:
    """The service extras are made unimportable; verify and flags still run, and the
    runtime module imports."""
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys
        BLOCKED = {{"fastapi", "sqlalchemy", "optuna", "uvicorn", "alembic", "redis", "psycopg",
                   "prometheus_client", "starlette"}}
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is a service extra")
        sys.meta_path.insert(0, Block())
        import workers.runtime, wire.artifact
        from service.cli import app
        for args in (["verify", {str(files["cuda"])!r}, "--public-key", {str(files["public"])!r}],
                     ["flags", {str(files["cuda"])!r}, "--public-key", {str(files["public"])!r}]):
            try:
                app(["artifact", *args])
            except SystemExit as exit:
                assert not exit.code, exit.code
        assert not BLOCKED & set(m.split(".")[0] for m in sys.modules), "a service extra was imported"
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK " in done.stdout and "--use_fast_math" in done.stdout
