"""`sampler: compileiq`: CompileIQ's engine driven by the scheduling step, checked against the
engine itself. A generation goes to the lease queue as one batch; results are told by
param_id (maximised objectives negated, failures and broken constraints as INVALID_SCORE);
the engine's checkpoint in the database lets a new process carry on without losing or
repeating a candidate. Scripted workers report compile metrics; the real compile path is
tests/service/test_acf_e2e.py's."""

from __future__ import annotations

import hashlib
import pathlib
import tempfile
from collections import Counter
from typing import Any

import pytest
from acf_support import CATALOG, needs_catalog
from conftest import Api, make_api

from service.scheduling import step
from service.store.models import SamplerCheckpoint

pytestmark = needs_catalog
POOL = 8
TOOLCHAIN = {"package": "nvidia-cuda-nvcc", "version": "13.3.73", "release": "13.3", "ptxas": "13.3.73"}


@pytest.fixture
def engine_api(tmp_path: Any) -> Any:
    """On SQLite: the engine's part does not depend on the database (the restart and replica
    tests below run on both)."""
    yield from make_api(f"sqlite:///{tmp_path / 'paretune.db'}", controls_catalog=CATALOG)


def register(api: Api, toolchain: dict[str, str] | None = TOOLCHAIN) -> tuple[dict[str, str], int]:
    headers = api.headers(api.token(kind="worker"))
    fingerprint: dict[str, Any] = {"backends": ["triton"], **({"toolchain": toolchain} if toolchain else {})}
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "cpu", "pool": "default", "fingerprint": fingerprint})
    assert r.status_code == 201, r.text
    return headers, int(r.json()["worker_id"])


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "acf engine", "kernel": {"backend": "triton", "builtin": "gemm_bf16",
                                         "workload": [{"dims": {"m": 256, "n": 256, "k": 256}}]},
        "space": [{"name": "BLOCK_M", "type": "categorical", "choices": [64, 128]},
                  {"name": "acf", "type": "compiler_controls", "version": "13.3"}],
        "objectives": ["spill_bytes", {"name": "sass_bytes", "direction": "maximize"}],
        "target": {"compute_capability": "9.0"},
        "sampler": {"name": "compileiq", "seed": 5, "options": {"pool_size": POOL, "generations": 3}},
        "budget": {"max_trials": 200, "max_failed_trials": 200}, "parallelism": 16,
    }
    doc.update(changes)
    return doc


def values_of(config: dict[str, Any]) -> dict[str, float]:
    """Made-up compile metrics, a fixed function of the configuration."""
    digest = hashlib.sha256(repr(sorted(config.items())).encode()).digest()
    return {"spill_bytes": float(digest[0] % 50), "sass_bytes": float(1000 + digest[1])}


def completed(trial: dict[str, Any]) -> dict[str, Any]:
    units = {"spill_bytes": "B", "sass_bytes": "B"}
    return {"status": "completed", "metrics": {k: {"value": v, "unit": units[k]} for k, v in
                                                values_of(trial["config"]).items()}}


def trials_of(api: Api, study_id: int) -> list[dict[str, Any]]:
    return api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": 500}, headers=api.admin).json()["items"]


def engine_ledger(api: Api, study_id: int) -> list[dict[str, Any]]:
    """The engine's own record of what it was told: CompileIQ restores the study's checkpoint."""
    from compileiq.ciq import Search
    from compileiq.types import WorkerTypes

    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.read() as session:
        blob = session.get(SamplerCheckpoint, study_id).state
    path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint.json"
    path.write_bytes(blob)
    search = Search.from_checkpoint(path, objective_function=lambda p: 0, disable_progress_bar=True,
                                    search_space=[{"BLOCK_M": _choice(2)}, CATALOG / "ptxas13.3.bin"],
                                    worker_type=WorkerTypes.MANUAL)
    return list(search.result._checkpoint_rows())


def acf_of(row: dict[str, Any]) -> str:
    """The sha256 of the ACF a ledger row's candidate carried."""
    return hashlib.sha256(bytes.fromhex(row["params"][1])).hexdigest()


def _choice(n: int) -> Any:
    import compileiq.search_spaces.base as ciq

    return ciq.choice(list(range(n)))


def test_generations_go_through_the_queue_and_are_told_by_param_id(engine_api: Api) -> None:
    api = engine_api
    worker = register(api)
    r = api.client.post("/v1/studies", json=document(), headers=api.admin)
    assert r.status_code == 201, r.text
    study_id = r.json()["id"]
    api.quiesce()
    # the baseline and one generation, not the study's parallelism of 16: the next generation
    # waits for this one's results
    queued = [t for t in trials_of(api, study_id) if t["state"] == "queued"]
    assert len(queued) == 1 + POOL
    held = api.lease(worker)
    assert held is not None and held["trial"]["config"]["acf"] == "none" and held["trial"]["compile_only"]
    r = api.post_result(worker, held["token"], completed(held["trial"]))
    assert r.status_code == 200
    first = api.lease(worker)
    assert first is not None
    (carried,) = first["trial"]["acfs"]
    assert carried["sha256"] == first["trial"]["config"]["acf"]  # the lease carries the ACF's bytes
    api.post_result(worker, first["token"], completed(first["trial"]))
    api.run_worker(worker, completed)

    study = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()
    assert study["state"] == "completed" and study["finish_reason"] == "CompileIQ's engine ran its 3 generations"
    trials = trials_of(api, study_id)
    engine = [t for t in trials if not t["is_baseline"]]
    assert len(engine) == 3 * POOL and all(t["state"] == "completed" for t in trials)
    assert Counter(t["config"]["acf"] for t in engine).most_common(1)[0][1] == 1  # a new ACF each time
    for trial in engine:
        file = api.client.get(f"/v1/controls/files/{trial['config']['acf']}", headers=api.admin).json()
        assert (file["origin"], file["compiler"], file["version"]) == ("engine", "ptxas", "13.3")

    # what the engine was told, by its own ledger: each candidate once, the values negated
    # where maximised, in the generation it was asked in
    told = engine_ledger(api, study_id)
    assert len(told) == len(engine) and len({acf_of(row) for row in told}) == len(told)
    by_acf = {t["config"]["acf"]: t for t in engine}
    for row in told:
        trial = by_acf[acf_of(row)]
        assert trial["config"]["BLOCK_M"] == [64, 128][row["params"][0]["BLOCK_M"]]
        expected = values_of(trial["config"])
        assert row["scores"] == [expected["spill_bytes"], -expected["sass_bytes"]]
    assert sorted(Counter(row["generation"] for row in told).values()) == [POOL] * 3


def test_failures_and_broken_constraints_are_invalid_scores(engine_api: Api) -> None:
    api = engine_api
    worker = register(api)
    doc = document(constraints=[{"metric": "spill_bytes", "op": "<=", "value": 40}])
    doc["sampler"]["options"]["generations"] = 1
    study_id = api.client.post("/v1/studies", json=doc, headers=api.admin).json()["id"]
    api.quiesce()
    failed: set[str] = set()

    def result(trial: dict[str, Any]) -> dict[str, Any]:
        if trial["number"] in (1, 2):
            failed.add(trial["config"]["acf"])
            return {"status": "failed", "failure_reason": "compile_error", "message": "ptxas: error"}
        return completed(trial)

    api.run_worker(worker, result)
    trials = trials_of(api, study_id)
    over = {t["config"]["acf"] for t in trials if t["state"] == "completed" and not t["feasible"]}
    ledger = engine_ledger(api, study_id)
    invalid = {acf_of(r) for r in ledger if "*" in r["scores"]}
    assert invalid == failed | over and len(failed) == 2
    # the engine replaced each failed candidate: the generation still holds POOL valid ones
    assert sum("*" not in r["scores"] for r in ledger) == POOL
    assert len(ledger) == len([t for t in trials if not t["is_baseline"]])


def test_a_new_process_carries_on_mid_generation(database_url: str) -> None:
    """The service stops with part of a generation reported and part in flight; another
    process (a fresh app on the same database) restores the engine and the study ends with
    every candidate told exactly once."""
    apis = make_api(database_url, controls_catalog=CATALOG)
    api = next(apis)
    worker = register(api)
    study_id = api.client.post("/v1/studies", json=document(), headers=api.admin).json()["id"]
    api.quiesce()
    held = [api.lease(worker) for _ in range(4)]  # the baseline and 3 candidates
    for lease in held[:3]:
        assert lease is not None
        api.post_result(worker, lease["token"], completed(lease["trial"]))
    api.quiesce()
    cache = api.client.app.state.paretune.cache  # type: ignore[attr-defined]
    workdirs = [m.workdir for m in cache._mirrors.values()]
    assert workdirs and all(d.exists() for d in workdirs)
    apis.close()  # the first process goes away; one lease still in flight
    assert not any(d.exists() for d in workdirs)  # its engines' working directories with it

    second = make_api(database_url, controls_catalog=CATALOG)
    api = next(second)
    assert held[3] is not None
    r = api.post_result(worker, held[3]["token"], completed(held[3]["trial"]))
    assert r.status_code == 200, r.text
    api.run_worker(worker, completed)
    study = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()
    assert study["state"] == "completed", study
    trials = trials_of(api, study_id)
    engine = [t for t in trials if not t["is_baseline"]]
    ledger = engine_ledger(api, study_id)
    assert len(engine) == 3 * POOL == len(ledger)
    told = [acf_of(r) for r in ledger]
    assert len(set(told)) == len(told) and set(told) == {t["config"]["acf"] for t in engine}
    second.close()


@pytest.mark.parametrize("ask_until_s", [step.ASK_UNTIL_S, -1.0], ids=["batch", "one-per-step"])
def test_two_replicas_step_one_study_without_losing_a_result(database_url: str, ask_until_s: float,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two service processes on one database, each with its own engine in memory, both
    step the study between one lease and its result: each result is told once, by whichever
    steps it, and each candidate becomes one trial, whichever replica queues it. With no
    time to ask (a loaded control plane) a step queues only as many trials as it accounted
    for (at least one), so a generation's candidates are queued by both replicas in turn."""
    monkeypatch.setattr(step, "ASK_UNTIL_S", ask_until_s)
    replicas = [make_api(database_url, controls_catalog=CATALOG, scheduler_process=True) for _ in range(2)]
    first, second = (next(r) for r in replicas)
    worker = register(first)
    doc = document()
    doc["sampler"]["options"]["generations"] = 2
    study_id = first.client.post("/v1/studies", json=doc, headers=first.admin).json()["id"]
    for turn in range(200):
        for api in (first, second):
            api.client.app.state.paretune.scheduler.step_now(study_id, wait=True)  # type: ignore[attr-defined]
        study = first.client.get(f"/v1/studies/{study_id}", headers=first.admin).json()
        if study["state"] != "running":
            break
        api = (first, second)[turn % 2]
        held = api.lease(worker)
        if held is not None:
            assert api.post_result(worker, held["token"], completed(held["trial"])).status_code == 200
    assert study["state"] == "completed", study
    engine = [t for t in trials_of(first, study_id) if not t["is_baseline"]]
    told = [acf_of(r) for r in engine_ledger(first, study_id)]
    assert len(engine) == 2 * POOL == len(told) == len(set(told))
    assert set(told) == {t["config"]["acf"] for t in engine}
    for replica in replicas:
        replica.close()
