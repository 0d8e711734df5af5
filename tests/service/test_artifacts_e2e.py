"""From a study to a configuration a program applies, with the real control plane (`paretune
serve` on Postgres) and real cpu workers (`paretune worker`): study -> promote -> validation
(interleaved rounds on two workers, with intervals) -> approval by a second person ->
`paretune artifact pull` -> verify -> the runtime module builds and runs the kernel with
exactly the approved configuration. Then a worker with a new compiler marks the artifact
stale, re-validation gives version 2, rollback restores version 1, and the audit log holds
every step."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import run_cli, wait_for

from wire.kernels import get_builtin
from workers.backends.cpu import flags_for
from workers.runtime import ArtifactStore

pytestmark = pytest.mark.postgres

FAST_MEASURE = {"warmup_s": 0.01, "min_repeats": 10, "max_repeats": 200, "target_s": 0.05}


def settled(client: Any, candidate_id: int) -> dict[str, Any] | None:
    detail = client.get(f"/v1/candidates/{candidate_id}").json()
    return detail if detail["state"] not in ("validating",) else None


def run_with_flags(flags: list[str], directory: Path) -> None:
    """Build the built-in matmul with `flags` and check its product against numpy."""
    (directory / "matmul.c").write_text(get_builtin("cpu", "matmul").read_source())  # type: ignore[union-attr]
    subprocess.run(["cc", "-shared", "-fPIC", *flags, "-o", "libmatmul.so", "matmul.c"], cwd=directory, check=True)
    library = ctypes.CDLL(str(directory / "libmatmul.so"))
    m, n, k = 67, 45, 38
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), dtype=np.float32)
    library.matmul(ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_void_p(a.ctypes.data),
                   ctypes.c_void_p(b.ctypes.data), ctypes.c_void_p(c.ctypes.data))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_study_to_runtime_through_approval(live_service, tmp_path: Path) -> None:
    service = live_service
    worker_token = service.make_worker_token()
    member = service.make_user_token("member")
    approver_a, approver_b = service.make_user_token("approver"), service.make_user_token("approver")
    viewer = service.make_user_token("viewer")
    document = {
        "name": "e2e: artifacts",
        "kernel": {"backend": "cpu", "builtin": "matmul", "workload": [{"dims": {"n": 64}}]},
        "objectives": ["runtime_ms", "latency_ms"],
        "sampler": {"name": "nsga2", "seed": 5, "options": {"population_size": 4}},
        "budget": {"max_trials": 8},
        "parallelism": 2,
        "measure": FAST_MEASURE,
        "limits": {"compile_timeout_s": 60, "run_timeout_s": 60},
    }
    cache = str(tmp_path / "cache")
    with service.client() as admin, service.client(approver_a) as alice, service.client(approver_b) as bob:
        study_id = admin.post("/v1/studies", json=document).json()["id"]
        for name in ("a", "b"):
            service.start_worker(worker_token, "--cache-dir", cache, name=name)
        wait_for(lambda: admin.get(f"/v1/studies/{study_id}").json()["state"] == "completed", 240, "the study")
        trials = admin.get(f"/v1/studies/{study_id}/trials").json()["items"]
        best = min((t for t in trials if t["state"] == "completed" and not t["is_baseline"]),
                   key=lambda t: t["values"]["runtime_ms"])

        # promoted by one approver; two live workers: two jobs of interleaved rounds
        r = alice.post(f"/v1/studies/{study_id}/candidates", json={"trials": [best["number"]], "rounds": 6,
                                                                    "note": "fastest runtime"})
        assert r.status_code == 201, r.text
        candidate = r.json()["candidates"][0]
        assert [j["rounds"] for j in r.json()["validation"]["jobs"]] == [3, 3]
        detail = wait_for(lambda: settled(admin, candidate["id"]), 240, "the validation")
        assert detail["state"] == "validated", detail
        for metric in detail["result"]["metrics"]:
            assert metric["rounds"] == 6 and metric["jobs"] == 2
            assert metric["ci_low"] < metric["ratio"] < metric["ci_high"]
        assert len(detail["result"]["correctness"]) >= 4 and all(s["passed"] for s in detail["result"]["correctness"])
        raw = admin.get(f"/v1/validations/{detail['validation_id']}", params={"samples": "true"}).json()
        for job in raw["jobs"]:
            assert job["report"]["order"] == [[None, candidate["id"]], [candidate["id"], None], [None, candidate["id"]]]
            assert len(job["report"]["baseline"]["values"]["runtime_ms"]) == 3

        with service.client(member) as mallory:
            assert mallory.post(f"/v1/candidates/{candidate['id']}/approve").status_code == 403
        own = alice.post(f"/v1/candidates/{candidate['id']}/approve")
        assert own.status_code == 403 and "second person" in own.json()["error"]["message"]
        v1 = bob.post(f"/v1/candidates/{candidate['id']}/approve", json={"why": "validated gain"})
        assert v1.status_code == 201, v1.text
        target = v1.json()["document"]["target"]

        # pull, verify, and a changed byte fails verification
        key = tmp_path / "paretune-public.pem"
        key.write_text(admin.get("/v1/artifacts/public-key").json()["pem"])
        artifacts = tmp_path / "artifacts"
        artifacts.mkdir()
        pulled = artifacts / "matmul.json"
        pull = run_cli("artifact", "pull", "matmul", "--gpu", target["cpu"], "--toolchain", f"cc={target['cc']}",
                       "-o", str(pulled), "--server", service.url, "--token", viewer, "--public-key", str(key))
        assert pull.returncode == 0, pull.stderr
        assert "exact match" in pull.stdout and pulled.read_text() == v1.json()["file"]
        assert run_cli("artifact", "verify", str(pulled), "--public-key", str(key)).returncode == 0
        changed = bytearray(pulled.read_bytes())
        digit = changed.index(b'"TILE_M":') + 9  # the first digit of the approved tile size
        changed[digit] = ord("7") if changed[digit] != ord("7") else ord("6")
        (tmp_path / "changed.json").write_bytes(bytes(changed))
        bad = run_cli("artifact", "verify", str(tmp_path / "changed.json"), "--public-key", str(key))
        assert bad.returncode == 2 and "content_changed" in bad.stderr + bad.stdout

        # the runtime module, offline: exactly the approved configuration, built and run
        store = ArtifactStore.load(artifacts, str(key))
        selection = store.select("matmul")
        assert selection.match is not None and selection.match.exact
        assert store.config("matmul") == best["config"]
        flags = store.flags("matmul", "cc")
        assert flags == flags_for(best["config"])
        run_with_flags(flags, tmp_path)

        # a worker with a new compiler marks it stale; re-validation gives version 2
        artifact_id = v1.json()["artifact_id"]
        with service.client(worker_token) as newcomer:
            r = newcomer.post("/v1/workers/register", json={"name": "upgraded", "pool": "default", "fingerprint": {
                "backends": ["cpu"], "cpu_model": target["cpu"], "machine": target["machine"],
                "compilers": {"cc": "gcc 99.1 (upgraded)"}}})
            assert r.status_code == 201
        artifact = admin.get(f"/v1/artifacts/{artifact_id}").json()
        assert artifact["stale"] is True and "gcc 99.1" in artifact["stale_reason"]
        again = alice.post(f"/v1/artifacts/{artifact_id}/revalidate", json={"note": "compiler upgrade",
                                                                          "rounds": 4})
        assert again.status_code == 201, again.text
        second = again.json()["candidates"][0]
        assert wait_for(lambda: settled(admin, second["id"]), 240, "the re-validation")["state"] == "validated"
        v2 = bob.post(f"/v1/candidates/{second['id']}/approve")
        assert v2.status_code == 201 and v2.json()["version"] == 2 and v2.json()["artifact_id"] == artifact_id
        assert v2.json()["document"]["supersedes"] == 1

        rollback = bob.post(f"/v1/artifacts/{artifact_id}/rollback", json={"version": 1, "why": "keep v1"})
        assert rollback.status_code == 200
        versions = admin.get(f"/v1/artifacts/{artifact_id}").json()["versions"]
        assert [(v["version"], v["state"]) for v in versions] == [(1, "current"), (2, "superseded")]
        assert admin.patch(f"/v1/artifacts/{artifact_id}/versions/1", json={"document": {}}).status_code == 409
        repull = run_cli("artifact", "pull", "matmul", "--gpu", target["cpu"], "-o", str(tmp_path / "again.json"),
                         "--server", service.url, "--token", viewer, "--public-key", str(key))
        assert repull.returncode == 0 and (tmp_path / "again.json").read_text() == v1.json()["file"]

        log = [(e["action"], e["actor"]) for e in reversed(admin.get("/v1/audit").json())]
        names = {t["id"]: t["name"] for t in admin.get("/v1/tokens").json()}
        assert [a for a, _ in log] == ["promote", "validated", "approve", "approve", "stale", "revalidate",
                                       "validated", "supersede", "approve", "approve", "rollback"]
        assert log[0][1] in names.values() and log[1][1] == "service" and log[2][1] != log[0][1]
