"""Steps of the artifact workflow through the HTTP API, with a scripted worker that reports
validation jobs (the real worker side is tested in tests/workers and the e2e test)."""

from __future__ import annotations

from typing import Any

from artifact_reports import TARGET, fingerprint, report
from conftest import Api
from fake_worker import result_for

__all__ = ["TARGET", "fingerprint", "report"]

def run_validations(api: Api, worker: tuple[dict[str, str], int], ratio: float = 0.8, **options: Any) -> list[dict]:
    """Lease and report every queued validation job; returns the specs leased."""
    specs = []
    while True:
        held = api.lease(worker)
        if held is None:
            return specs
        assert held.get("validation"), f"expected a validation job, got {held}"
        spec = held["validation"]
        specs.append(spec)
        body = report(spec, {c["candidate_id"]: ratio for c in spec["candidates"]}, **options)
        r = api.client.post(f"/v1/leases/{held['token']}/validation", json=body, headers=worker[0])
        assert r.status_code == 200, r.text


def completed_study(api: Api, trials: int = 8) -> tuple[dict[str, Any], tuple[dict[str, str], int]]:
    """A finished python study and its worker (registered with the test target's toolchain)."""
    study = api.create_study(budget={"max_trials": trials}, parallelism=2)
    headers = api.headers(api.token(kind="worker"))
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "w", "pool": "default", "fingerprint": fingerprint()})
    assert r.status_code == 201, r.text
    worker = (headers, int(r.json()["worker_id"]))
    api.run_worker(worker, result_for)
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed", done
    return done, worker


def good_trials(api: Api, study_id: int, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    items = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": "500"},
                           headers=headers or api.admin).json()
    return [t for t in items["items"] if t["state"] == "completed" and not t["is_baseline"] and t["feasible"]]


def promote(api: Api, token: str, study_id: int, numbers: list[int], rounds: int = 6, note: str = "n") -> Any:
    return api.client.post(f"/v1/studies/{study_id}/candidates", headers=api.headers(token),
                           json={"trials": numbers, "note": note, "rounds": rounds})


def approved_artifact(api: Api) -> dict[str, Any]:
    """An approved version 1, with the tokens and worker that made it."""
    study, worker = completed_study(api)
    member, approver = api.token(role="member"), api.token(role="approver")
    number = good_trials(api, study["id"])[0]["number"]
    r = promote(api, member, study["id"], [number])
    assert r.status_code == 201, r.text
    candidate = r.json()["candidates"][0]
    run_validations(api, worker)
    r = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=api.headers(approver),
                        json={"why": "faster"})
    assert r.status_code == 201, r.text
    return {"study": study, "worker": worker, "member": member, "approver": approver, "candidate": candidate,
            "version": r.json()}
