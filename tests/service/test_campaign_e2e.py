"""A campaign over Mixtral-8x7B's layer at tensor-parallel 8 under a small trace, end to end with
the real control plane and cpu workers: cpu stand-ins for its kernels (a `module:` RMSNorm and
fused MoE from an installed Liger-shaped package, the built-in matmul for the router), a study per
kernel and per M bucket for the fused MoE, each kernel's front and the layer's time per token
(checked against the studies' own values), then each bucket's best validated, approved and
exported to a vLLM file that `paretune artifact verify` accepts."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli, wait_for
from stand_ins import install_minikern, use_site

pytestmark = pytest.mark.postgres

FAST_MEASURE = {"warmup_s": 0.01, "min_repeats": 5, "max_repeats": 50, "target_s": 0.03}
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:17:{3 + t:02d}.0000000,{p},{o}\n" for t, p, o in [(0, 5, 3), (0, 6, 2), (1, 2, 1)])
SERVER = ["--max-num-seqs", "2", "--max-num-batched-tokens", "8", "--step-ms", "1000", "--step-us-per-token", "0",
          "--buckets", "1,2,4,8"]
MOE_BASELINE = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "NUM_WARPS": 4,
                "NUM_STAGES": 2}


def campaign(rms_baseline: tuple[int, int]) -> dict[str, Any]:
    return {
        "name": "mixtral tp8", "model": "mixtral-8x7b", "tp": 8,
        "defaults": {"objectives": ["time_per_token_us"], "budget": {"max_trials": 3}, "parallelism": 2,
                     "sampler": {"name": "random", "seed": 3}, "measure": FAST_MEASURE,
                     "limits": {"compile_timeout_s": 60, "run_timeout_s": 120}},
        "kernels": {
            "rmsnorm": {"study": {
                "kernel": {"backend": "cpu", "module": "minikern.ops.rms_norm:_rms_norm_forward_kernel",
                           "options": {"problem": "rmsnorm"}},
                "space": [{"name": "BLOCK_SIZE", "type": "categorical", "choices": [1024, 4096]},
                          {"name": "NUM_WARPS", "type": "categorical", "choices": [2, 4, 8]}],
                "baseline": {"BLOCK_SIZE": rms_baseline[0], "NUM_WARPS": rms_baseline[1]}}},
            "router": {"study": {"kernel": {"backend": "cpu", "builtin": "matmul"}}},
            "fused_moe": {"per_bucket": True, "study": {
                "kernel": {"backend": "cpu", "module": "minikern.ops.fused_moe:fused_moe_kernel",
                           "options": {"problem": "matmul"}},
                "space": [{"name": "BLOCK_SIZE_M", "type": "categorical", "choices": [16, 32]},
                          {"name": "BLOCK_SIZE_N", "type": "categorical", "choices": [64, 128]},
                          {"name": "BLOCK_SIZE_K", "type": "categorical", "choices": [64]},
                          {"name": "GROUP_SIZE_M", "type": "categorical", "choices": [1, 8]},
                          {"name": "NUM_WARPS", "type": "categorical", "choices": [4, 8]},
                          {"name": "NUM_STAGES", "type": "categorical", "choices": [2]}],
                "baseline": MOE_BASELINE}},
        },
    }


def settled(client: Any, candidate_id: int) -> dict[str, Any] | None:
    detail = client.get(f"/v1/candidates/{candidate_id}").json()
    return detail if detail["state"] != "validating" else None


@pytest.fixture
def site() -> Iterator[Path]:
    """The package installed where the trials' unprivileged user can read it (not under pytest's
    owner-only temporary directories), as an operator installs a library for workers."""
    directory = Path(tempfile.mkdtemp(prefix="paretune-minikern-"))
    directory.chmod(0o755)
    try:
        yield install_minikern(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_campaign_over_a_presets_layer_to_a_vllm_file(live_service, tmp_path: Path, site: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    live_service.env["PYTHONPATH"] = os.pathsep.join([str(site), live_service.env.get("PYTHONPATH", "")])
    use_site(monkeypatch, site)
    from minikern.ops.utils import calculate_settings
    (tmp_path / "trace.csv").write_text(TRACE)
    imported = run_cli("workload", "import", str(tmp_path / "trace.csv"), "--format", "azure", *SERVER, "--json")
    assert imported.returncode == 0, imported.stderr
    (tmp_path / "mix.json").write_text(imported.stdout)
    (tmp_path / "campaign.json").write_text(json.dumps(campaign(calculate_settings(4096))))

    worker_token = live_service.make_worker_token()
    for name in ("a", "b"):
        live_service.start_worker(worker_token, "--cache-dir", str(tmp_path / "cache"), name=name)
    ran = run_cli("workload", "campaign", str(tmp_path / "campaign.json"), "--workload", str(tmp_path / "mix.json"),
                  "--server", live_service.url, "--token", live_service.admin_token, "--json", timeout=600)
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    studies = outcome["studies"]
    assert [(s["kernel"], s["bucket"]) for s in studies] == [("rmsnorm", None), ("router", None), ("fused_moe", 2),
                                                             ("fused_moe", 4), ("fused_moe", 8)]
    assert all(s["state"] == "completed" and s["front"] >= 1 for s in studies), [
        (s["name"], s["state"], s["front"]) for s in studies]

    # the layer's figure from the studies' own values: RMSNorm twice, the router once, the fused MoE's
    # buckets weighted by their steps and tokens (2: 0.5, 4: 0.25, 8: 0.25)
    by = {(s["kernel"], s["bucket"]): s for s in studies}
    for key, figure in (("baseline_per_token_us", "baseline_us"), ("best_per_token_us", "tuned_us")):
        moe = [(w * m, by[("fused_moe", m)][key] if key == "baseline_per_token_us" else
                min(by[("fused_moe", m)][key], by[("fused_moe", m)]["baseline_per_token_us"]))
               for m, w in ((2, 0.5), (4, 0.25), (8, 0.25))]
        single = {k: by[(k, None)][key] if key == "baseline_per_token_us" else
                  min(by[(k, None)][key], by[(k, None)]["baseline_per_token_us"]) for k in ("rmsnorm", "router")}
        expected = 2 * single["rmsnorm"] + single["router"] + sum(t * v for t, v in moe) / sum(t for t, _ in moe)
        assert outcome["layer"][figure] == pytest.approx(expected, rel=1e-9)
    assert outcome["layer"]["kernels"] == ["rmsnorm", "router", "fused_moe"]

    # each bucket's best validated and approved by a second person, then exported for vLLM
    member, approver = live_service.make_user_token("approver"), live_service.make_user_token("approver")
    files, promoted_configs = [], {}
    with live_service.client(member) as alice, live_service.client(approver) as bob:
        for m in (2, 4, 8):
            study = by[("fused_moe", m)]
            # the fastest trial other than the baseline (which may itself be the front's best)
            ranked = alice.get(f"/v1/studies/{study['id']}/trials",
                               params={"state": "completed", "sort": "time_per_token_us", "limit": 5}).json()
            best = next(t for t in ranked["items"] if not t["is_baseline"])
            promoted_configs[m] = best["config"]
            promoted = alice.post(f"/v1/studies/{study['id']}/candidates", json={"trials": [best["number"]],
                                                                                 "rounds": 2, "note": "campaign"})
            assert promoted.status_code == 201, promoted.text
            candidate = promoted.json()["candidates"][0]["id"]
            detail = wait_for(lambda c=candidate: settled(alice, c), 300, "the validation")
            assert detail["state"] == "validated", detail
            approved = bob.post(f"/v1/candidates/{candidate}/approve", json={"why": "campaign"})
            assert approved.status_code == 201, approved.text
            files.append(tmp_path / f"fused_moe_m{m}.json")
            files[-1].write_text(approved.json()["file"])
            assert approved.json()["document"]["controls"]["config"]["BLOCK_SIZE_M"] == best["config"]["BLOCK_SIZE_M"]
        (tmp_path / "key.pem").write_text(alice.get("/v1/artifacts/public-key").json()["pem"])
    key = ["--public-key", str(tmp_path / "key.pem")]
    out = tmp_path / "vllm-configs"
    exported = run_cli("artifact", "export", "vllm-moe", *map(str, files), "--preset", "mixtral-8x7b", "--tp", "8",
                       "--workload", str(tmp_path / "mix.json"), "--device-name", "cpu_stand_in", "-o", str(out), *key)
    assert exported.returncode == 0, exported.stderr + exported.stdout
    vllm_file = out / "E=8,N=1792,device_name=cpu_stand_in.json"
    configs = json.loads(vllm_file.read_text())
    assert sorted(configs, key=int) == ["2", "4", "8"]
    for m in (2, 4, 8):
        best = promoted_configs[m]
        assert configs[str(m)] == {"BLOCK_SIZE_M": best["BLOCK_SIZE_M"], "BLOCK_SIZE_N": best["BLOCK_SIZE_N"],
                                   "BLOCK_SIZE_K": best["BLOCK_SIZE_K"], "GROUP_SIZE_M": best["GROUP_SIZE_M"],
                                   "num_warps": best["NUM_WARPS"], "num_stages": best["NUM_STAGES"]}
    verified = run_cli("artifact", "verify", str(vllm_file), *map(str, files), *key)
    assert verified.returncode == 0 and verified.stdout.startswith(f"OK {vllm_file}"), verified.stderr
