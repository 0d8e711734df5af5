"""ACFs for real, on a CPU: `paretune serve` (Postgres) and two `paretune worker`s search a
built-in Triton kernel's parameters and the ACF with `sampler: compileiq` for spill bytes and
registers; each trial is Triton -> PTX -> ptxas 13.3 with the engine's ACF -> cubin in the
worker's sandbox. The front is exact against the trials; the approved artifact's ACF,
applied by `paretune artifact flags` to ptxas 13.3, gives back the trial's ptxas report byte
for byte, and a 13.5 ptxas is refused naming both releases. A worker of ptxas 13.5 makes
the artifact stale, and fails a pack study's ACF trials as `unsupported`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from acf_support import CATALOG, OTHER_RELEASE, TOOLCHAINS, needs_catalog, ptxas_13_3, ptxas_other
from helpers import run_cli, start_service, wait_for

from service.controls.packs import build
from wire.contract import KernelSpec
from workers.backends.triton_backend import TritonBackend
from workers.compilers import ptxas

pytestmark = [pytest.mark.postgres, pytest.mark.slow, needs_catalog]
SHAPE = {"batch": 1, "heads": 2, "seq": 256, "head_dim": 128, "causal": 1}


def dominates(a: list[float], b: list[float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def test_acf_search_to_an_applied_artifact(postgres_database: str, tmp_path: Path) -> None:
    ptxas_13_3()
    ptxas_other()
    service = start_service(postgres_database, tmp_path, {"PARETUNE_CONTROLS_CATALOG": str(CATALOG),
                                                          "PARETUNE_LEASE_S": "6", "PARETUNE_HEARTBEAT_S": "1"})
    try:
        _run(service, tmp_path)
    finally:
        service.stop()


def _run(service: Any, tmp_path: Path) -> None:
    worker_token = service.make_worker_token("cpu")
    approver = service.make_user_token("approver")
    for name in ("a", "b"):
        service.start_worker(worker_token, "--pool", "cpu", name=name)
    document = {
        "name": "attention: ACF and tiles for spills", "pool": "cpu", "parallelism": 6,
        "kernel": {"backend": "triton", "builtin": "attention_fwd", "workload": [{"dims": SHAPE}]},
        "space": [{"name": "BLOCK_N", "type": "categorical", "choices": [64, 128]},
                  {"name": "acf", "type": "compiler_controls", "version": "13.3"}],
        "baseline": {"BLOCK_N": 128, "acf": "none"},
        "objectives": ["spill_bytes", "registers"], "target": {"compute_capability": "9.0"},
        "sampler": {"name": "compileiq", "seed": 11, "options": {"pool_size": 8, "generations": 1}},
        "budget": {"max_trials": 40},
    }
    with service.client() as admin, service.client(approver) as reviewer:
        wait_for(lambda: len(admin.get("/v1/workers").json()) == 2, 120, "the workers")
        r = admin.post("/v1/studies", json=document)
        assert r.status_code == 201, r.text
        study_id = r.json()["id"]
        wait_for(lambda: admin.get(f"/v1/studies/{study_id}").json()["state"] != "running", 300, service.log_path)
        study = admin.get(f"/v1/studies/{study_id}").json()
        assert study["state"] == "completed" and study["finish_reason"] == "CompileIQ's engine ran its 1 generations"
        trials = admin.get(f"/v1/studies/{study_id}/trials", params={"limit": 100}).json()["items"]
        done = [t for t in trials if t["state"] == "completed"]
        assert len(done) == len(trials) == 9, [(t["number"], t["state"], t.get("message")) for t in trials]
        for trial in done:
            report = admin.get(f"/v1/studies/{study_id}/trials/{trial['number']}").json()["compile_report"]
            assert report["toolchain"]["ptxas"].startswith("13.3") and report["compile_only"]

        # the front, exact against the trials
        points = {t["number"]: [t["values"]["spill_bytes"], t["values"]["registers"]] for t in done}
        expected = {n for n, p in points.items() if not any(dominates(q, p) for q in points.values())}
        front = admin.get(f"/v1/studies/{study_id}/front").json()
        assert {t["number"] for t in front["trials"]} == expected

        # the front's ACF trial with the fewest spills, promoted, validated, approved
        chosen = min((t for t in done if t["number"] in expected and t["config"]["acf"] != "none"),
                     key=lambda t: points[t["number"]], default=None)
        chosen = chosen or min((t for t in done if t["config"]["acf"] != "none"), key=lambda t: points[t["number"]])
        r = admin.post(f"/v1/studies/{study_id}/candidates", json={"trials": [chosen["number"]], "rounds": 2})
        assert r.status_code == 201, r.text
        candidate_id = r.json()["candidates"][0]["id"]
        detail = wait_for(lambda: (lambda d: d if d["state"] != "validating" else None)(
            admin.get(f"/v1/candidates/{candidate_id}").json()), 180, service.log_path)
        assert detail["state"] == "validated", json.dumps(detail)[:3000]
        version = reviewer.post(f"/v1/candidates/{candidate_id}/approve", json={"why": "fewer spills"})
        assert version.status_code == 201, version.text
        document_out = version.json()["document"]
        acf = document_out["controls"]["acf"]
        assert acf["sha256"] == chosen["config"]["acf"] and acf["compiler_version"] == "13.3"
        assert acf["measured_with"].startswith("13.3.") and acf["notice"] == "© NVIDIA Corporation, 2026."
        assert document_out["correctness"]["scope"] == "compiled"
        (listed,) = admin.get(f"/v1/artifacts/{version.json()['artifact_id']}").json()["versions"]
        assert listed["acf"]["sha256"] == acf["sha256"] and "content_base64" not in listed["acf"]
        artifact = tmp_path / "attention_fwd.json"
        artifact.write_text(version.json()["file"])
        key = tmp_path / "key.pem"
        key.write_text(admin.get("/v1/artifacts/public-key").json()["pem"])

        # the artifact's ACF, applied by `paretune artifact flags` to ptxas 13.3: the trial's report
        flags = run_cli("artifact", "flags", str(artifact), "--tool", "ptxas", "--format", "json",
                        "--public-key", str(key), "--acf-dir", str(tmp_path / "acf"))
        assert flags.returncode == 0, flags.stderr
        body = json.loads(flags.stdout)
        assert body["acf"]["applied_with"].startswith("13.3.")
        acf_path = Path(body["acf"]["path"])
        assert hashlib.sha256(acf_path.read_bytes()).hexdigest() == acf["sha256"]
        kernel = KernelSpec(backend="triton", builtin="attention_fwd", options={"compute_capability": "9.0"},
                            workload=[{"dims": SHAPE}])
        config = {k: v for k, v in chosen["config"].items() if k != "acf"}
        built = TritonBackend().compile(kernel, {**config, "acf": "none"}, tmp_path / "ptx", compile_only=True)
        ptx = tmp_path / "ptx" / f"{next(iter(built.report['shapes']))}.ptx"
        assembled = ptxas.assemble(ptx, ptxas=ptxas_13_3(), arch="sm_90a", options=body["flags"]["ptxas"], acf=None)
        trial = admin.get(f"/v1/studies/{study_id}/trials/{chosen['number']}").json()
        (shape,) = trial["compile_report"]["shapes"].values()
        assert assembled.log == shape["ptxas_log"]
        assert assembled.metrics()["spill_bytes"] == chosen["values"]["spill_bytes"]

        # another release's ptxas: refused, naming both
        other = run_cli("artifact", "flags", str(artifact), "--tool", "ptxas", "--ptxas", str(ptxas_other()),
                        "--public-key", str(key))
        assert other.returncode == 3 and "13.3" in other.stderr and OTHER_RELEASE in other.stderr

        # the 13.3 workers stop; a Booster Pack of the study's ACFs is imported with the
        # release's checksum and a study of it queued (random sampling over the pack)
        for proc in service.children:
            proc.terminate()
        for proc in service.children:
            proc.wait(60)
        shas = [t["config"]["acf"] for t in done if t["config"]["acf"] != "none"][:3]
        files = {f"{sha[:12]}.acf": _file(admin, sha) for sha in shas}
        zip_path = tmp_path / "study-pack.zip"
        zip_path.write_bytes(build("study-pack", files, compiler="ptxas", version="13.3"))
        sums = tmp_path / "SHA256SUMS.txt"
        sums.write_text(f"{hashlib.sha256(zip_path.read_bytes()).hexdigest()}  study-pack.zip\n")
        imported = run_cli("acf", "import-pack", str(zip_path), "--sums", str(sums), "--server", service.url,
                           "--token", service.admin_token)
        assert imported.returncode == 0 and "imported study-pack: 3" in imported.stdout, imported.stderr
        pack_doc = {**document, "name": "the pack on ptxas 13.5", "sampler": {"name": "random", "seed": 2},
                    "budget": {"max_trials": 4}}
        pack_doc["space"] = [document["space"][0], {"name": "acf", "type": "compiler_controls", "version": "13.3",
                                                    "pack": "study-pack"}]
        r = admin.post("/v1/studies", json=pack_doc)
        assert r.status_code == 201, r.text
        pack_study = r.json()["id"]

        # the pool now requires toolchain 13.5: a worker started without --toolchain selects it,
        # makes the artifact stale, and fails the pack's ACF trials as unsupported
        assert admin.put("/v1/pools/cpu", json={"toolchain": OTHER_RELEASE}).status_code == 200
        service.env = {**service.env, "PARETUNE_TOOLCHAINS_DIR": str(TOOLCHAINS)}
        service.start_worker(worker_token, "--pool", "cpu", name="old")
        wait_for(lambda: len(admin.get("/v1/workers").json()) == 3, 120, "the 13.5 worker")
        newest = max(admin.get("/v1/workers").json(), key=lambda w: w["id"])
        assert newest["fingerprint"]["toolchain"]["version"] == OTHER_RELEASE
        artifact_row = admin.get(f"/v1/artifacts/{version.json()['artifact_id']}").json()
        assert artifact_row["stale"] and OTHER_RELEASE in artifact_row["stale_reason"]
        wait_for(lambda: admin.get(f"/v1/studies/{pack_study}").json()["state"] != "running", 240, service.log_path)
        pack_trials = admin.get(f"/v1/studies/{pack_study}/trials").json()["items"]
        for t in pack_trials:
            if t["config"]["acf"] == "none":
                assert t["state"] == "completed", t  # no ACF: 13.5 compiles it
            else:
                assert t["state"] == "failed" and t["failure_reason"] == "unsupported", t
                assert "13.3" in t["message"] and OTHER_RELEASE in t["message"]
        assert any(t["config"]["acf"] != "none" for t in pack_trials)
        # re-validating the stale artifact compiles its configuration with the new ptxas, which
        # refuses the ACF: the validation says so
        again = reviewer.post(f"/v1/artifacts/{version.json()['artifact_id']}/revalidate",
                              json={"note": "ptxas 13.5", "rounds": 2})
        assert again.status_code == 201, again.text
        second = again.json()["candidates"][0]["id"]
        settled = wait_for(lambda: (lambda d: d if d["state"] != "validating" else None)(
            admin.get(f"/v1/candidates/{second}").json()), 180, service.log_path)
        assert settled["state"] == "failed" and "unsupported" in settled["result"]["message"], settled
        assert OTHER_RELEASE in settled["result"]["message"]
        # and a study that asks for 13.3 controls is refused there now
        refused = admin.post("/v1/studies", json=pack_doc)
        assert refused.status_code == 422 and "requires the toolchain" in refused.json()["error"]["message"]

def _file(client: Any, sha: str) -> bytes:
    import base64

    return base64.b64decode(client.get(f"/v1/controls/files/{sha}", params={"content": "true"}).json()
                            ["content_base64"])
