"""Exports: vLLM's fused-MoE file as vLLM names and reads it, a triton.Config module, their
records and the check against the signed artifacts."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from artifacts.artifact_factory import H200
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from workload_factory import moe_config, signed_artifact

from service.artifacts.exports import (
    ExportError,
    ExportRecord,
    VllmMoeParameters,
    assign_buckets,
    check,
    rebuild,
    triton_configs,
    vllm_device_name,
    vllm_fused_moe,
    vllm_moe_file_name,
)
from wire.contract import KernelSpec, Target
from workers.runtime import LoadedArtifact, read_artifacts
from workers.runtime.apply import triton_config_arguments

BUCKETS = [1, 2, 4, 8, 16, 32, 64]


def load(directory: Path, public_pem: str, files: dict[str, bytes]) -> list[LoadedArtifact]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return read_artifacts([directory / name for name in files], public_pem)


@pytest.fixture
def small_and_large(tmp_path: Path, signing_key: Ed25519PrivateKey, public_pem: str) -> list[LoadedArtifact]:
    """BLOCK_SIZE_M 16 approved at m 1..16, BLOCK_SIZE_M 64 (8 warps) at m 32, 64."""
    return load(tmp_path / "artifacts", public_pem, {
        "small.json": signed_artifact(signing_key, moe_config(16), [1, 2, 4, 8, 16]),
        "large.json": signed_artifact(signing_key, moe_config(64, warps=8), [32, 64], version=2),
    })


def vllm_reads(content: bytes) -> dict[int, Any]:
    """As vLLM's get_moe_configs reads a tuned file: JSON, `triton_version` dropped, keys as ints."""
    configs = json.loads(content)
    configs.pop("triton_version", None)
    return {int(key): value for key, value in configs.items()}


def test_names_as_vllm_gives_them() -> None:
    # vLLM v0.34.0 ships files of these names (vllm/model_executor/layers/fused_moe/configs/)
    assert vllm_moe_file_name(128, 384, "NVIDIA_H200", "fp8_w8a8", [128, 128]) == (
        "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json")
    assert vllm_moe_file_name(8, 7168, "NVIDIA_H100_80GB_HBM3", "fp8_w8a8") == (
        "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json")
    assert vllm_moe_file_name(64, 640, "NVIDIA_A100-SXM4-80GB") == "E=64,N=640,device_name=NVIDIA_A100-SXM4-80GB.json"
    assert vllm_moe_file_name(8, 7168, "NVIDIA_H200", None, [0, 0]) == "E=8,N=7168,device_name=NVIDIA_H200.json"
    assert [vllm_device_name(g) for g in ("NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H100 80GB HBM3",
                                          "NVIDIA A100-SXM4-80GB", "NVIDIA RTX 6000 Ada / Pro")] == [
        "NVIDIA_H200", "NVIDIA_H200", "NVIDIA_H100_80GB_HBM3", "NVIDIA_A100-SXM4-80GB", "NVIDIA_RTX_6000_Ada_Pro"]


def test_every_bucket_from_its_artifact(small_and_large: list[LoadedArtifact]) -> None:
    export = vllm_fused_moe(small_and_large, VllmMoeParameters(experts=8, n=7168, buckets=BUCKETS[::-1]))
    assert export.file_name == "E=8,N=7168,device_name=NVIDIA_H200.json"
    assert list(json.loads(export.content)) == ["triton_version", *map(str, BUCKETS)]  # ascending M
    assert json.loads(export.content)["triton_version"] == H200.triton
    configs = vllm_reads(export.content)
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "num_warps": 4,
             "num_stages": 3}
    assert configs == {**dict.fromkeys([1, 2, 4, 8, 16], small),
                       **dict.fromkeys([32, 64], {**small, "BLOCK_SIZE_M": 64, "num_warps": 8})}
    record = export.record
    assert [(r.kernel, r.version, r.sha256) for r in record.artifacts] == [
        ("fused_moe", 1, small_and_large[0].sha256), ("fused_moe", 2, small_and_large[1].sha256)]
    assert record.buckets["16"] == small_and_large[0].sha256 and record.buckets["32"] == small_and_large[1].sha256
    assert record.parameters["device_name"] == "NVIDIA_H200" and record.parameters["buckets"] == BUCKETS


def test_a_bucket_without_its_artifact_is_refused(small_and_large: list[LoadedArtifact], tmp_path: Path,
                                                  signing_key: Ed25519PrivateKey, public_pem: str) -> None:
    with pytest.raises(ExportError, match=r"no artifact was measured at m = 24, 128 \(they cover 1, 2, 4, 8, 16, "
                                          r"32, 64\)"):
        vllm_fused_moe(small_and_large, VllmMoeParameters(experts=8, n=7168, buckets=[16, 24, 32, 128]))
    again = load(tmp_path / "more", public_pem, {"x.json": signed_artifact(signing_key, moe_config(32), [16, 24])})
    with pytest.raises(ExportError, match=r"m = 16 is served by 2 artifacts \(fused_moe v1 .*, fused_moe v1 .*\)"):
        assign_buckets([*small_and_large, *again], [16, 24])


def test_keys_the_kernel_held_fixed(tmp_path: Path, signing_key: Ed25519PrivateKey, public_pem: str) -> None:
    gemm = KernelSpec(backend="triton", builtin="gemm_bf16")  # BLOCK_M, BLOCK_N, BLOCK_K tuned; GROUP_M constant
    artifacts = load(tmp_path, public_pem, {"g.json": signed_artifact(
        signing_key, {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4}, [16],
        kernel=gemm, name="gemm_bf16")})
    with pytest.raises(ExportError, match="has no GROUP_SIZE_M; pass --fixed GROUP_SIZE_M=VALUE"):
        vllm_fused_moe(artifacts, VllmMoeParameters(experts=8, n=7168, buckets=[16]))
    export = vllm_fused_moe(artifacts, VllmMoeParameters(experts=8, n=7168, buckets=[16], fixed={"GROUP_SIZE_M": 8}))
    assert vllm_reads(export.content) == {16: {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64,
                                               "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 4}}


def test_one_device_per_file(small_and_large: list[LoadedArtifact], tmp_path: Path, signing_key: Ed25519PrivateKey,
                             public_pem: str) -> None:
    h100 = H200.model_copy(update={"gpu": "NVIDIA H100 80GB HBM3"})
    other = load(tmp_path / "h100", public_pem, {"h.json": signed_artifact(signing_key, moe_config(32), [128],
                                                                           target=h100)})
    with pytest.raises(ExportError, match="validated on different devices"):
        vllm_fused_moe([*small_and_large, *other], VllmMoeParameters(experts=8, n=7168, buckets=[16, 128]))
    with pytest.raises(ExportError, match=r"validated on NVIDIA H200 \(NVIDIA_H200 to vLLM\), not NVIDIA_B200"):
        vllm_fused_moe(small_and_large, VllmMoeParameters(experts=8, n=7168, buckets=[16], device_name="NVIDIA_B200"))
    # a cpu stand-in (no GPU; Triton's options spelled as macros) takes the device name it stands in for
    cpu = Target(cpu="Intel Xeon", machine="x86_64", cc="gcc 12")
    stand_in = load(tmp_path / "cpu", public_pem, {"c.json": signed_artifact(
        signing_key, {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "NUM_WARPS": 4,
                      "NUM_STAGES": 2}, [1, 2], target=cpu, kernel=KernelSpec(backend="cpu", builtin="matmul"))})
    with pytest.raises(ExportError, match="name no GPU"):
        vllm_fused_moe(stand_in, VllmMoeParameters(experts=8, n=7168, buckets=[1, 2]))
    export = vllm_fused_moe(stand_in, VllmMoeParameters(experts=8, n=7168, buckets=[1, 2], device_name="NVIDIA_H200"))
    assert export.file_name == "E=8,N=7168,device_name=NVIDIA_H200.json" and "triton_version" not in json.loads(
        export.content)
    assert vllm_reads(export.content)[2]["num_warps"] == 4


def test_the_record_checks_the_file(small_and_large: list[LoadedArtifact], tmp_path: Path,
                                    signing_key: Ed25519PrivateKey, public_pem: str) -> None:
    export = vllm_fused_moe(small_and_large, VllmMoeParameters(experts=8, n=7168, buckets=BUCKETS))
    record = ExportRecord.model_validate_json(export.record_bytes())
    check(export.content, record, list(reversed(small_and_large)), triton_config_arguments)
    assert rebuild(record, small_and_large, triton_config_arguments).content == export.content

    edited = export.content.replace(b'"num_warps": 8', b'"num_warps": 4')
    with pytest.raises(ExportError, match="changed after it was exported"):
        check(edited, record, small_and_large, triton_config_arguments)
    forged = record.model_copy(update={"sha256": hashlib.sha256(edited).hexdigest()})
    with pytest.raises(ExportError, match="do not give"):
        check(edited, forged, small_and_large, triton_config_arguments)
    with pytest.raises(ExportError, match=r"made from artifacts not given here: fused_moe v2"):
        check(export.content, record, small_and_large[:1], triton_config_arguments)


def test_a_triton_config_module(small_and_large: list[LoadedArtifact], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                signing_key: Ed25519PrivateKey, public_pem: str) -> None:
    fp_fusion_off = load(tmp_path / "fp", public_pem, {"f.json": signed_artifact(
        signing_key, {**moe_config(128), "enable_fp_fusion": False}, [256], version=3)})
    export = triton_configs([*small_and_large, small_and_large[0], *fp_fusion_off], triton_config_arguments,
                            "moe_configs.py")

    class Config:  # triton.Config's signature, recording what it is given
        def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int = 3, **options: Any) -> None:
            self.arguments = {"kwargs": kwargs, "num_warps": num_warps, "num_stages": num_stages, **options}

    fake_triton = types.ModuleType("triton")
    fake_triton.Config = Config  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton", fake_triton)
    namespace: dict[str, Any] = {}
    exec(compile(export.content, "moe_configs.py", "exec"), namespace)
    block = {"BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    assert [c.arguments for c in namespace["CONFIGS"]] == [
        {"kwargs": {"BLOCK_SIZE_M": 16, **block}, "num_warps": 4, "num_stages": 3},
        {"kwargs": {"BLOCK_SIZE_M": 64, **block}, "num_warps": 8, "num_stages": 3},
        {"kwargs": {"BLOCK_SIZE_M": 128, **block}, "num_warps": 4, "num_stages": 3},
    ]
    assert [a["sha256"] for a in namespace["PARETUNE_ARTIFACTS"]] == [a.sha256 for a in
                                                                      [*small_and_large, *fp_fusion_off]]
    assert namespace["PARETUNE_ARTIFACTS"][0]["shapes"][0] == {"m": 1, "n": 7168, "k": 4096}
    assert b"also pass at launch what triton.Config cannot carry: enable_fp_fusion=False" in export.content
    record = ExportRecord.model_validate_json(export.record_bytes())
    check(export.content, record, [*small_and_large, *fp_fusion_off], triton_config_arguments)
