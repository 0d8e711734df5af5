"""Configurations that cannot launch, through the HTTP API on SQLite and Postgres: refused
before queuing where the service knows the target's limits (from the pool's workers or the
document), reported by the worker where it does not, kept off the budget when the study says
so, told to the sampler as violated constraints, and capped.

What cannot launch is taken from the H200's exhaustive GEMM sweep (bench/results), not from
the service's resource model: the 74 configurations that failed there with OutOfResources."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import Api

from service.scheduling.mirror import Mirror
from service.store.models import Study

SWEEP = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_raw_2026-11-29" / "sweep.json"
H200 = {"compute_capability": "9.0", "shared_memory_per_block": 232448, "threads_per_block": 1024,
        "registers_per_block": 65536, "registers_per_thread": 255}
REQUIRED = re.compile(r"Required: (\d+), Hardware limit: (\d+)")


def key(config: dict[str, Any]) -> str:
    return json.dumps({k: config[k] for k in sorted(config)})


def recorded() -> dict[str, dict[str, Any]]:
    return {key(row["config"]): row for row in json.loads(SWEEP.read_text())["rows"]}


RECORDED = recorded()
CANNOT_LAUNCH = {k for k, row in RECORDED.items() if row["status"] != "completed"}


def gpu_worker(api: Api, limits: dict[str, Any] | None) -> tuple[dict[str, str], int]:
    headers = api.headers(api.token(kind="worker"))
    fingerprint: dict[str, Any] = {"backends": ["triton"], "gpu_name": "NVIDIA H200"}
    if limits is not None:
        fingerprint["device_limits"] = limits
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "gpu", "pool": "default", "fingerprint": fingerprint})
    assert r.status_code == 201, r.text
    return headers, int(r.json()["worker_id"])


def gemm_study(api: Api, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "gemm", "kernel": {"backend": "triton", "builtin": "gemm_bf16"}, "objectives": ["runtime_ms"],
        "sampler": {"name": "random", "seed": 5}, "budget": {"max_trials": 24}, "parallelism": 2,
    }
    doc.update(changes)
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 201, r.text
    api.quiesce()
    return api.client.get(f"/v1/studies/{r.json()['id']}", headers=api.admin).json()  # type: ignore[no-any-return]


def like_the_h200(leased: list[dict[str, Any]]) -> Any:
    """A worker answering as the H200 did: the sweep's runtime, or Triton's refusal."""

    def answer(trial: dict[str, Any]) -> dict[str, Any]:
        leased.append(trial)
        row = RECORDED[key(trial["config"])]
        if row["status"] != "completed":
            return {"status": "failed", "failure_reason": "infeasible", "message": row["message"]}
        return {"status": "completed", "metrics": {"runtime_ms": {"value": row["values"]["runtime_ms"]}}}

    return answer


def trials_of(api: Api, study_id: int) -> list[dict[str, Any]]:
    r = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000}, headers=api.admin)
    return r.json()["items"]  # type: ignore[no-any-return]


def study_of(api: Api, study_id: int) -> dict[str, Any]:
    return api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()  # type: ignore[no-any-return]


def told(api: Api, study_id: int) -> dict[int, dict[str, float]]:
    """The constraints the study's sampler holds for each trial, by trial number (a mirror
    rebuilt from the table, as after a restart)."""
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    numbers = {t["id"]: t["number"] for t in trials_of(api, study_id)}
    with state.db.read() as session:
        mirror = Mirror(session.get(Study, study_id))
        mirror.sync(session)
        return {numbers[row_id]: mirror.storage.get_trial(optuna_id).constraints
                for row_id, optuna_id in mirror.ids.items()}


def test_what_cannot_launch_on_the_pools_gpus_is_refused_before_queuing(api: Api) -> None:
    worker = gpu_worker(api, H200)
    study = gemm_study(api, sampler={"name": "nsga2", "seed": 5, "options": {"population_size": 8}})
    leased: list[dict[str, Any]] = []
    api.run_worker(worker, like_the_h200(leased))

    trials = trials_of(api, study["id"])
    refused = [t for t in trials if t["failure_reason"] == "infeasible"]
    assert refused, "the sampler proposed nothing the H200 could not launch: pick another seed"
    # exactly what the H200 could not launch was refused, and none of it reached a worker
    assert {key(t["config"]) for t in refused} <= CANNOT_LAUNCH
    assert not {key(t["config"]) for t in leased} & CANNOT_LAUNCH
    for trial in refused:
        assert (trial["state"], trial["worker_id"], trial["attempt"], trial["started_at"]) == (
            "failed", None, 0, None)
        limit = REQUIRED.search(RECORDED[key(trial["config"])]["message"])
        assert limit is not None
        assert trial["message"] == (f"cannot launch on sm_90: out of resource: shared memory, "
                                    f"Required: {limit.group(1)}, Hardware limit: {limit.group(2)} "
                                    "(refused before queuing)")
    # the budget is the leased trials': infeasible ones do not count by default
    study = study_of(api, study["id"])
    assert study["state"] == "completed" and study["finish_reason"] == "budget spent"
    assert len(leased) == sum(t["state"] == "completed" for t in trials) == 24
    assert study["progress"]["created"] == 24 + len(refused) == len(trials)
    assert (study["progress"]["infeasible"], study["progress"]["failed"], study["progress"]["infeasible_counted"]) == (
        len(refused), len(refused), False)
    listed = api.client.get("/v1/studies", headers=api.admin).json()["items"]
    assert [s["progress"]["infeasible"] for s in listed if s["id"] == study["id"]] == [len(refused)]
    # the sampler heard each as a violated constraint, by how far over the limit it is
    constraints = told(api, study["id"])
    for trial in refused:
        limit = REQUIRED.search(RECORDED[key(trial["config"])]["message"])
        assert limit is not None
        excess = int(limit.group(1)) / int(limit.group(2)) - 1
        assert constraints[trial["number"]] == {"failed": 0.0, "resources": pytest.approx(excess, rel=1e-5)}
    assert all(constraints[t["number"]] == {"failed": 0.0, "resources": 0.0} for t in trials
               if t["state"] == "completed")


def test_infeasible_trials_count_against_the_budget_when_the_study_says_so(api: Api) -> None:
    worker = gpu_worker(api, H200)
    study = gemm_study(api, budget={"max_trials": 24, "count_infeasible": True})
    leased: list[dict[str, Any]] = []
    api.run_worker(worker, like_the_h200(leased))
    trials = trials_of(api, study["id"])
    refused = [t for t in trials if t["failure_reason"] == "infeasible"]
    assert refused
    assert len(trials) == 24 and len(leased) == 24 - len(refused)
    study = study_of(api, study["id"])
    assert study["state"] == "completed"
    assert (study["progress"]["infeasible"], study["progress"]["infeasible_counted"]) == (len(refused), True)


def test_a_document_target_refuses_without_workers_knowing(api: Api) -> None:
    worker = gpu_worker(api, None)  # reports no limits
    study = gemm_study(api, target={"compute_capability": "9.0"})
    assert study["document"]["target"] == H200
    leased: list[dict[str, Any]] = []
    api.run_worker(worker, like_the_h200(leased))
    trials = trials_of(api, study["id"])
    assert [t for t in trials if t["failure_reason"] == "infeasible"]
    assert not {key(t["config"]) for t in leased} & CANNOT_LAUNCH
    # a smaller GPU named in the document: more of the space is refused (sm_86: 99 KB)
    small = gemm_study(api, name="small", target={"compute_capability": "8.6"}, budget={"max_trials": 12})
    api.run_worker(worker, like_the_h200([]))
    refused = [t for t in trials_of(api, small["id"]) if t["failure_reason"] == "infeasible"]
    assert len(refused) > len(CANNOT_LAUNCH & {key(t["config"]) for t in refused})
    assert all("Hardware limit: 101376" in t["message"] for t in refused)


def test_without_known_limits_the_worker_reports_infeasible_and_it_is_not_counted(api: Api) -> None:
    worker = gpu_worker(api, None)
    study = gemm_study(api, sampler={"name": "tpe", "seed": 5})
    leased: list[dict[str, Any]] = []
    api.run_worker(worker, like_the_h200(leased))
    trials = trials_of(api, study["id"])
    reported = [t for t in trials if t["failure_reason"] == "infeasible"]
    assert reported and {key(t["config"]) for t in reported} <= CANNOT_LAUNCH
    assert all(t["worker_id"] == worker[1] and t["attempt"] == 1 for t in reported)
    study = study_of(api, study["id"])
    assert study["state"] == "completed"
    assert sum(t["state"] == "completed" for t in trials) == 24 == len(trials) - len(reported)
    constraints = told(api, study["id"])
    for trial in reported:  # the excess read back from Triton's message
        limit = REQUIRED.search(trial["message"])
        assert limit is not None
        assert constraints[trial["number"]]["resources"] == pytest.approx(
            int(limit.group(1)) / int(limit.group(2)) - 1, rel=1e-9)


# BLOCK_K 128 with 256x256 tiles needs 131072 bytes a stage: no depth fits; BLOCK_K 32 fits all
HALF_FEASIBLE = [
    {"name": "BLOCK_M", "type": "categorical", "choices": [256]},
    {"name": "BLOCK_N", "type": "categorical", "choices": [256]},
    {"name": "BLOCK_K", "type": "categorical", "choices": [32, 128]},
    {"name": "num_warps", "type": "categorical", "choices": [8]},
    {"name": "num_stages", "type": "categorical", "choices": [2, 3, 4, 5, 6]},
]
FITS = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "num_warps": 8, "num_stages": 2}


def test_a_study_fails_past_its_cap_on_infeasible_trials(api: Api) -> None:
    worker = gpu_worker(api, H200)
    study = gemm_study(api, space=HALF_FEASIBLE, baseline=FITS,
                       budget={"max_trials": 10, "max_infeasible": 2})
    api.run_worker(worker, like_the_h200([]))
    study = study_of(api, study["id"])
    trials = trials_of(api, study["id"])
    refused = [t for t in trials if t["failure_reason"] == "infeasible"]
    # five of the ten points cannot launch and the budget wants ten: the third one ends it
    assert (study["state"], len(refused)) == ("failed", 3)
    assert study["finish_reason"] == ("too many configurations that cannot launch on the target "
                                      "(3 > budget.max_infeasible 2); narrow the search space")
    assert all(RECORDED[key(t["config"])]["status"] != "completed" for t in refused)


def test_a_study_fails_after_too_many_infeasible_proposals_in_a_row(api: Api) -> None:
    worker = gpu_worker(api, H200)
    never = [*HALF_FEASIBLE[:2], {"name": "BLOCK_K", "type": "categorical", "choices": [128]},
             *HALF_FEASIBLE[3:]]
    study = gemm_study(api, space=never, baseline={**FITS, "BLOCK_K": 128},
                       budget={"max_trials": 10, "max_infeasible_in_a_row": 3})
    leased: list[dict[str, Any]] = []
    api.run_worker(worker, like_the_h200(leased))
    study = study_of(api, study["id"])
    trials = trials_of(api, study["id"])
    assert (study["state"], len(trials), leased) == ("failed", 3, [])
    assert study["finish_reason"] == ("3 configurations in a row cannot launch on the target "
                                      "(budget.max_infeasible_in_a_row); narrow the search space")
    assert all(t["failure_reason"] == "infeasible" for t in trials)


@pytest.mark.parametrize(("target", "field"), [
    ({"compute_capability": "4.2"}, "target.compute_capability"),
    ({}, "target"),
    ({"shared_memory_per_block": 0}, "target.shared_memory_per_block"),
])
def test_a_bad_target_is_refused_naming_the_field(api: Api, target: dict[str, Any], field: str) -> None:
    doc = {"name": "g", "kernel": {"backend": "triton", "builtin": "gemm_bf16"}, "objectives": ["runtime_ms"],
           "target": target}
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field, r.text


def test_a_target_on_a_cpu_kernel_is_refused(api: Api) -> None:
    r = api.client.post("/v1/studies", json={**_cpu_doc(), "target": {"compute_capability": "9.0"}},
                        headers=api.admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "target", r.text
    assert "GPU kernels" in r.json()["error"]["message"]


def _cpu_doc() -> dict[str, Any]:
    return {"name": "c", "kernel": {"backend": "cpu", "builtin": "matmul"}, "objectives": ["runtime_ms"]}


def test_a_worker_may_report_infeasible_but_not_the_service_only_reasons(api: Api) -> None:
    worker = gpu_worker(api, None)
    gemm_study(api, budget={"max_trials": 2})
    held = api.lease(worker)
    assert held is not None
    r = api.post_result(worker, held["token"], {"status": "failed", "failure_reason": "lease expired"})
    assert r.status_code == 422 and "infeasible" in r.text, r.text  # listed among those it may report
    r = api.post_result(worker, held["token"], {"status": "failed", "failure_reason": "infeasible",
                                                "message": "out of resource: threads, Required: 2048, "
                                                           "Hardware limit: 1024"})
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
