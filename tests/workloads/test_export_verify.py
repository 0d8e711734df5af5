"""`paretune artifact verify` of an exported file: a vLLM tuned config (its artifacts in the record
beside it) and a triton.Config module (naming its artifacts itself) check against the artifact
ids and sha256 they carry and the signed artifacts; every tampering found is exit status 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner
from workload_factory import moe_config, signed_artifact

from service.cli import app

runner = CliRunner()


@pytest.fixture
def signed(tmp_path: Path, signing_key: Ed25519PrivateKey, public_pem: str) -> tuple[list[Path], list[str]]:
    """Artifacts for m 1, 2 (BLOCK_SIZE_M 16) and 4 (32), and the options naming the key."""
    files = []
    for m, block in ((1, 16), (2, 16), (4, 32)):
        files.append(tmp_path / f"fused_moe_m{m}.json")
        files[-1].write_bytes(signed_artifact(signing_key, moe_config(block), [m], version=m))
    (tmp_path / "key.pem").write_text(public_pem)
    return files, ["--public-key", str(tmp_path / "key.pem")]


def verify(file: Path, files: list[Path], key: list[str]) -> tuple[int, str]:
    done = runner.invoke(app, ["artifact", "verify", str(file), *map(str, files), *key])
    return done.exit_code, done.output


def exported_vllm(tmp_path: Path, files: list[Path], key: list[str]) -> Path:
    done = runner.invoke(app, ["artifact", "export", "vllm-moe", *map(str, files), "-E", "8", "-N", "7168",
                               "--buckets", "1,2,4", "-o", str(tmp_path / "out"), *key])
    assert done.exit_code == 0, done.output
    return tmp_path / "out" / "E=8,N=7168,device_name=NVIDIA_H200.json"


def reseal(file: Path) -> None:
    """Make the record's sha256 the file's again, as one tampering with both would."""
    record = file.with_name(file.name + ".paretune.json")
    body = json.loads(record.read_text())
    body["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
    record.write_text(json.dumps(body))


def test_a_vllm_file_verifies_against_its_artifacts(tmp_path: Path, signed) -> None:
    files, key = signed
    vllm = exported_vllm(tmp_path, files, key)
    code, output = verify(vllm, files, key)
    shas = [json.loads(f.read_text())["sha256"] for f in files]
    assert code == 0 and output.startswith(f"OK {vllm}: sha256 {hashlib.sha256(vllm.read_bytes()).hexdigest()}")
    assert all(f"fused_moe v{v} ({sha[:12]})" in output for v, sha in zip((1, 2, 4), shas, strict=True)), output


def test_a_tampered_vllm_file_fails(tmp_path: Path, signed) -> None:
    files, key = signed
    vllm = exported_vllm(tmp_path, files, key)
    original = vllm.read_text()
    vllm.write_text(original.replace('"BLOCK_SIZE_M": 32', '"BLOCK_SIZE_M": 64'))
    code, output = verify(vllm, files, key)
    assert code == 2 and "changed after it was exported" in output, output

    reseal(vllm)  # the record rewritten too: the signed artifacts still tell
    code, output = verify(vllm, files, key)
    assert code == 2 and "do not give" in output, output

    configs = json.loads(original)
    del configs["4"]  # a bucket dropped: vLLM would serve m 4 with m 2's configuration
    vllm.write_text(json.dumps(configs, indent=4) + "\n")
    reseal(vllm)
    code, output = verify(vllm, files, key)
    assert code == 2 and "holds M keys 1, 2, its record 1, 2, 4" in output, output


def test_a_vllm_file_needs_the_artifacts_it_names_signed_by_the_trusted_key(tmp_path: Path, signed) -> None:
    files, key = signed
    vllm = exported_vllm(tmp_path, files, key)
    code, output = verify(vllm, files[:2], key)
    assert code == 2 and "made from artifacts not given here: fused_moe v4" in output, output
    forged = tmp_path / "forged.json"
    forged.write_bytes(signed_artifact(Ed25519PrivateKey.generate(), moe_config(32), [4], version=4))
    code, output = verify(vllm, [*files[:2], forged], key)
    assert code == 2 and "verification failed" in output, output
    code, output = verify(vllm, [], key)
    assert code == 1 and "pass the signed artifacts it names" in output, output


def test_a_triton_module_carries_its_artifact_ids(tmp_path: Path, signed) -> None:
    files, key = signed
    module = tmp_path / "moe_configs.py"
    done = runner.invoke(app, ["artifact", "export", "triton", *map(str, files), "-o", str(module), *key])
    assert done.exit_code == 0, done.output
    module.with_name(module.name + ".paretune.json").unlink()  # the module alone names its artifacts
    code, output = verify(module, files, key)
    assert code == 0 and output.startswith(f"OK {module}"), output

    text = module.read_text()
    module.write_text(text.replace("'num_warps': 4", "'num_warps': 8", 1).replace("num_warps=4", "num_warps=8", 1))
    code, output = verify(module, files, key)
    assert code == 2 and "changed after it was exported" in output, output

    other = json.loads(files[0].read_text())["sha256"]
    module.write_text(text.replace(other, "0" * 64))
    code, output = verify(module, files, key)
    assert code == 2 and f"made from artifacts not given here: fused_moe v1 ({'0' * 12})" in output, output


def test_a_signed_artifact_still_verifies_alone(signed) -> None:
    files, key = signed
    code, output = verify(files[0], [], key)
    assert code == 0 and output.startswith(f"OK {files[0]}"), output
    code, output = verify(files[0], files[1:], key)
    assert code == 1 and "is a signed artifact, not an exported file" in output, output
