"""@paretune_autotune without Triton: a plain launcher gets the approved configuration of its
call's bucket from a bundle, offline, and the given configs with exactly one warning otherwise."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from artifacts.artifact_factory import H200
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from workload_factory import moe_config, signed_artifact

from service.artifacts.exports import VllmMoeParameters, vllm_fused_moe
from workers.runtime import ArtifactFallbackWarning, ArtifactStore, ArtifactToolchainWarning, read_artifacts
from workers.runtime.autotune import config_kwargs, paretune_autotune
from workers.runtime.bundle import write_bundle

ON_H200 = H200.model_dump(exclude_none=True)  # the machine the tests pretend to be
DEFAULTS = [{"kwargs": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1},
             "num_warps": 2, "num_stages": 2}]


@pytest.fixture
def bundle(tmp_path: Path, signing_key: Ed25519PrivateKey, public_pem: str) -> Path:
    """fused_moe: BLOCK_SIZE_M 16 approved at m 1..16, 64 (8 warps) at m 32 and 64, for n 7168, k 4096."""
    path = tmp_path / "kernels.json"
    path.write_bytes(write_bundle([signed_artifact(signing_key, moe_config(16), [1, 2, 4, 8, 16]),
                                   signed_artifact(signing_key, moe_config(64, warps=8), [32, 64], version=2)],
                                  public_pem))
    return path


class Launcher:
    """A kernel launcher as Triton calls one, recording the meta-parameters of each launch."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def __call__(self, x: Any, M: int, N: int, K: int, **meta: Any) -> str:  # noqa: N803 (Triton's names)
        self.launches.append(meta)
        return f"ran {M}x{N}x{K}"


def decorated(bundle: Path, public_pem: str, configs: list[Any] = DEFAULTS, **options: Any) -> Any:
    return paretune_autotune(kernel="fused_moe", key=["M", "N", "K"], configs=configs, artifacts=bundle,
                             public_keys=public_pem, target=ON_H200, **options)(Launcher())


def test_each_call_gets_its_buckets_approved_configuration(bundle: Path, public_pem: str) -> None:
    kernel = decorated(bundle, public_pem)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        assert kernel(None, 16, 7168, 4096) == "ran 16x7168x4096"
        for m in (1, 3, 20, 24):  # 24 is as near 16 as 32: the smaller, as vLLM picks its M key
            kernel(None, m, N=7168, K=4096)
        for m in (25, 64, 5000):
            kernel(None, M=m, N=7168, K=4096)
    small = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "num_warps": 4,
             "num_stages": 3}
    large = {**small, "BLOCK_SIZE_M": 64, "num_warps": 8}
    assert kernel.fn.launches == [small] * 5 + [large] * 3
    assert kernel.config_for(M=33, N=7168, K=4096) == large


def test_the_given_configs_with_exactly_one_warning(bundle: Path, public_pem: str) -> None:
    kernel = decorated(bundle, public_pem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(None, 16, 4096, 4096)  # no artifact measured at N 4096
        kernel(None, 64, 4096, 4096)
        kernel(None, 8, 7168, 1024)
        kernel(None, 8, 7168, 4096)  # approved
    assert [w.category for w in caught] == [ArtifactFallbackWarning]
    assert "no approved configuration of 'fused_moe' near {'M': 16, 'N': 4096, 'K': 4096} for NVIDIA H200" in str(
        caught[0].message)
    assert kernel.fn.launches[:3] == [config_kwargs(DEFAULTS[0])] * 3 and kernel.fn.launches[3]["BLOCK_SIZE_M"] == 16


def test_another_gpu_or_no_bundle_falls_back(bundle: Path, public_pem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = {**ON_H200, "gpu": "NVIDIA H100 80GB HBM3"}
    elsewhere = paretune_autotune(kernel="fused_moe", key=["M"], configs=DEFAULTS, artifacts=bundle,
                                  public_keys=public_pem, target=h100)(Launcher())
    monkeypatch.delenv("PARETUNE_ARTIFACTS", raising=False)
    nothing = paretune_autotune(kernel="fused_moe", key=["M"], configs=DEFAULTS)(Launcher())
    for kernel, why in ((elsewhere, "for NVIDIA H100 80GB HBM3 9.0 (artifacts of it: 2, for this device: 0)"),
                        (nothing, "no artifacts to resolve 'fused_moe' from")):
        with pytest.warns(ArtifactFallbackWarning, match=why.replace("(", r"\(").replace(")", r"\)")):
            kernel(None, 16, 7168, 4096)
        assert kernel.fn.launches == [config_kwargs(DEFAULTS[0])]


def test_the_bundle_from_the_environment_and_a_near_toolchain(bundle: Path, public_pem: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "key.pem").write_text(public_pem)
    monkeypatch.setenv("PARETUNE_ARTIFACTS", str(bundle))
    monkeypatch.setenv("PARETUNE_PUBLIC_KEY", str(tmp_path / "key.pem"))
    kernel = paretune_autotune(kernel="fused_moe", key=["M"], configs=DEFAULTS,
                               target={**ON_H200, "triton": "3.5.0"})(Launcher())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(None, 2, 7168, 4096)
        kernel(None, 64, 7168, 4096)
    assert [w.category for w in caught] == [ArtifactToolchainWarning]
    assert "triton 3.4.0 here 3.5.0" in str(caught[0].message)
    assert [launch["BLOCK_SIZE_M"] for launch in kernel.fn.launches] == [16, 64]


def test_a_plain_launcher_keeps_the_fastest_of_several_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARETUNE_ARTIFACTS", raising=False)
    slow, fast = {"BLOCK": 16, "num_warps": 4}, {"BLOCK": 64, "num_warps": 4}
    calls: list[tuple[int, int]] = []

    @paretune_autotune(kernel="k", key=["n"], configs=[slow, fast])
    def launch(n: int, BLOCK: int, num_warps: int) -> int:  # noqa: N803
        calls.append((n, BLOCK))
        time.sleep(0.03 if BLOCK == 16 else 0)
        return BLOCK

    with pytest.warns(ArtifactFallbackWarning):
        assert launch(1000) == 64
    assert launch(1000) == 64 and launch(n=1000) == 64
    assert calls == [(1000, 16), (1000, 64), (1000, 64), (1000, 64), (1000, 64)]  # timed once each, then the best


def test_the_exported_vllm_file_and_the_decorator_agree(bundle: Path, public_pem: str) -> None:
    """The vLLM file of the same artifacts, read as vLLM reads it and looked up as vLLM looks an M
    up (the nearest key), gives each M the configuration the decorator launches."""
    store = ArtifactStore.load(bundle, public_pem, target=ON_H200)
    export = vllm_fused_moe(read_artifacts(bundle, public_pem),
                            VllmMoeParameters(experts=8, n=7168, buckets=[1, 2, 4, 8, 16, 32, 64]))
    table = {int(k): v for k, v in json.loads(export.content).items() if k != "triton_version"}
    kernel = paretune_autotune(kernel="fused_moe", key=["M", "N", "K"], configs=DEFAULTS, artifacts=store)(Launcher())
    for m in range(1, 200):
        assert kernel.config_for(M=m, N=7168, K=4096) == table[min(table, key=lambda key: abs(key - m))]


def test_a_key_argument_must_be_passed() -> None:
    kernel = paretune_autotune(kernel="fused_moe", key=["M"], configs=DEFAULTS, artifacts=ArtifactStore([]))(
        Launcher())
    with pytest.raises(TypeError, match="the key argument 'M' was not passed"):
        kernel(None)
    with pytest.raises(ValueError, match="key names at least one argument"):
        paretune_autotune(kernel="fused_moe", key=[])
