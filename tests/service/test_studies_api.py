"""Studies through the HTTP API on SQLite and Postgres, with a scripted worker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import Api, make_api, study_doc
from fake_worker import objective, result_for
from optuna._hypervolume import compute_hypervolume

from service.scheduling import step


def brute_force_front(points: dict[int, tuple[float, ...]]) -> set[int]:
    def dominated(p: tuple[float, ...], q: tuple[float, ...]) -> bool:
        return all(b <= a for a, b in zip(p, q, strict=True)) and any(b < a for a, b in zip(p, q, strict=True))

    return {k for k, p in points.items() if not any(dominated(p, q) for j, q in points.items() if j != k)}


def all_trials(api: Api, study_id: int, **params: str) -> list[dict]:
    items, cursor = [], None
    while True:
        query = {"limit": "7", **params, **({"cursor": cursor} if cursor else {})}
        page = api.client.get(f"/v1/studies/{study_id}/trials", params=query, headers=api.admin).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_study_runs_to_budget_and_front_is_the_non_dominated_set(api: Api) -> None:
    study = api.create_study()
    assert study["progress"]["created"] == 4  # parallelism trials queued at once
    worker = api.worker()
    assert api.run_worker(worker, result_for) == 30

    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed" and done["finish_reason"] == "budget spent"
    assert done["progress"]["completed"] == 30 and done["progress"]["in_flight"] == 0

    trials = all_trials(api, study["id"])
    assert [t["number"] for t in trials] == list(range(30))
    baseline = trials[0]
    assert baseline["is_baseline"] and baseline["config"] == {"x": 0.5, "y": 3}
    assert sum(t["is_baseline"] for t in trials) == 1
    assert baseline["relative"] == {"f1": 1.0, "f2": 1.0}
    for t in trials:  # values are what the worker reported, ratios are against the baseline
        expected = objective(t["config"])
        assert t["values"] == pytest.approx({"f1": expected["f1"], "f2": expected["f2"]})
        assert t["relative"]["f2"] == pytest.approx(t["values"]["f2"] / baseline["values"]["f2"])

    points = {t["number"]: (t["values"]["f1"], t["values"]["f2"]) for t in trials}
    front = api.client.get(f"/v1/studies/{study['id']}/front", headers=api.admin).json()
    assert {t["number"] for t in front["trials"]} == brute_force_front(points)
    assert {t["number"] for t in all_trials(api, study["id"], on_front="true")} == brute_force_front(points)
    assert front["baseline"]["number"] == 0

    base = np.array(points[0])
    relative = np.array([np.array(points[n]) / base for n in brute_force_front(points)])
    reference = np.array([2.0, 2.0])
    inside = relative[(relative < reference).all(axis=1)]
    assert front["hypervolume"] == pytest.approx(compute_hypervolume(inside, reference))
    history = [h["hypervolume"] for h in front["history"]]
    assert history == sorted(history) and history[-1] == pytest.approx(front["hypervolume"])
    assert front["reference_point_raw"]["f1"] == pytest.approx(2 * points[0][0])


def test_objective_sort_pages_in_order(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 20})
    api.run_worker(api.worker(), result_for)
    descending = all_trials(api, study["id"], sort="-f2")
    values = [t["values"]["f2"] for t in descending]
    assert len(values) == 20 and values == sorted(values, reverse=True)
    ascending = all_trials(api, study["id"], sort="f1")
    assert [t["values"]["f1"] for t in ascending] == sorted(t["values"]["f1"] for t in ascending)


def test_failed_trials_are_kept_with_reason_and_the_study_goes_on(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 12, "max_failed_trials": 20})

    def results(trial: dict) -> dict:
        if trial["number"] % 3 == 1:
            return {"status": "failed", "failure_reason": "compile_error", "message": "boom", "log": "err: x"}
        if trial["number"] % 3 == 2:
            return {"status": "completed", "metrics": {"f1": {"value": 1.0}}}  # f2 missing
        return result_for(trial)

    api.run_worker(api.worker(), results)
    trials = all_trials(api, study["id"])
    assert len(trials) == 12
    by_number = {t["number"]: t for t in trials}
    assert by_number[1]["state"] == "failed" and by_number[1]["failure_reason"] == "compile_error"
    assert by_number[2]["state"] == "failed" and "no value for 'f2'" in by_number[2]["message"]
    detail = api.client.get(f"/v1/studies/{study['id']}/trials/1", headers=api.admin).json()
    assert detail["log"] == "err: x" and detail["message"] == "boom"
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed" and done["progress"]["failed"] == 8


def test_too_many_failures_fail_the_study(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 50, "max_failed_trials": 3}, parallelism=2)
    api.run_worker(api.worker(), lambda t: {"status": "failed", "failure_reason": "crash"})
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "failed" and "too many failed trials" in done["finish_reason"]
    # the fourth failure ends the study; a trial already queued may have been leased meanwhile
    assert 4 <= done["progress"]["failed"] <= 5


def test_constraints_make_trials_infeasible_and_keep_them_off_the_front(api: Api) -> None:
    study = api.create_study(constraints=[{"metric": "power_w", "op": "<=", "value": 120.0}],
                             budget={"max_trials": 24})
    api.run_worker(api.worker(), result_for)
    trials = all_trials(api, study["id"], state="completed")
    for t in trials:
        assert t["feasible"] == (objective(t["config"])["power_w"] <= 120.0)
    feasible = {t["number"]: (t["values"]["f1"], t["values"]["f2"]) for t in trials if t["feasible"]}
    front = api.client.get(f"/v1/studies/{study['id']}/front", headers=api.admin).json()
    assert {t["number"] for t in front["trials"]} == brute_force_front(feasible)


def test_duplicate_result_counts_once_and_unknown_lease_is_refused(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 3}, parallelism=1)
    worker = api.worker()
    held = api.lease(worker)
    assert held is not None and held["trial"]["is_baseline"]
    body = result_for(held["trial"])
    first = api.post_result(worker, held["token"], body)
    second = api.post_result(worker, held["token"], body)
    assert first.status_code == 200 and not first.json()["duplicate"]
    assert second.status_code == 200 and second.json()["duplicate"]
    unknown = api.post_result(worker, "not-a-lease", body)
    assert unknown.status_code == 409 and unknown.json()["error"]["field"] == "token"
    api.quiesce()
    progress = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()["progress"]
    assert progress["completed"] == 1 and progress["created"] == 2


def test_a_result_hands_out_the_next_lease_when_asked(api: Api) -> None:
    """`next_lease` in a result: the acknowledgement carries the worker's next trial (the
    oldest queued one, leased as a long-poll would), or null when nothing is queued; a
    study run that way alone ends with the same trials as one leased by long-polls."""
    study = api.create_study(budget={"max_trials": 6}, parallelism=2)
    worker = api.worker()
    held = api.lease(worker)
    assert held is not None and held["trial"]["number"] == 0
    queued = [t["number"] for t in api.client.get(f"/v1/studies/{study['id']}/trials", params={"state": "queued"},
                                                  headers=api.admin).json()["items"]]
    ack = api.post_result(worker, held["token"], {**result_for(held["trial"]), "next_lease": True}).json()
    assert ack["state"] == "completed" and not ack["duplicate"]
    following = ack["next_lease"]
    assert following is not None and following["trial"]["number"] == min(queued)
    rows = {t["number"]: t for t in all_trials(api, study["id"])}
    assert rows[min(queued)]["state"] == "running"  # leased to this worker, its token live
    # without the flag, nothing is handed out; the lease handed out takes a result as any other
    plain = api.post_result(worker, following["token"], result_for(following["trial"])).json()
    assert plain["state"] == "completed" and plain["next_lease"] is None
    assert api.run_worker(worker, result_for, next_lease=True) == 4
    trials = all_trials(api, study["id"])
    assert sorted(t["number"] for t in trials) == list(range(6))
    assert all(t["state"] == "completed" for t in trials)
    progress = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()["progress"]
    assert progress["completed"] == 6 and progress["in_flight"] == 0


@pytest.fixture
def stepped_here(database_url: str) -> Iterator[Api]:
    """The steps run only when a test runs them: the app leaves them to a scheduler process,
    and none is started."""
    yield from make_api(database_url, scheduler_process=True)


def test_a_step_replaces_every_trial_it_accounts_for_however_long_it_takes(
        stepped_here: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that has no time left to ask more (a loaded machine) still queues as many
    trials as it accounted for, so the queue keeps its level; asking beyond that is what its
    time allows."""
    api = stepped_here
    monkeypatch.setattr(step, "ASK_UNTIL_S", -1.0)
    scheduler = api.client.app.state.paretune.scheduler  # type: ignore[attr-defined]
    study = api.create_study(budget={"max_trials": 100}, parallelism=12)  # a trial a step
    assert api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()["progress"]["in_flight"] == 12
    worker = api.worker()
    for _ in range(9):
        held = api.lease(worker)
        assert held is not None
        assert api.post_result(worker, held["token"], result_for(held["trial"])).status_code == 200
    report = scheduler.step_now(study["id"], wait=True)
    assert (report.accounted, report.queued) == (9, 9)
    progress = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()["progress"]
    assert (progress["completed"], progress["in_flight"]) == (9, 12)
    assert scheduler.step_now(study["id"], wait=True).queued == 0  # no room left


def test_expired_lease_is_requeued_then_failed_after_max_attempts(fast_expiry_api: Api) -> None:
    api = fast_expiry_api
    study = api.create_study(budget={"max_trials": 2}, parallelism=1,
                             limits={"max_attempts": 2, "compile_timeout_s": 10, "run_timeout_s": 10})
    worker = api.worker()
    first = api.lease(worker)
    assert first is not None and first["trial"]["attempt"] == 1
    time.sleep(1.2)  # the lease (0.6 s) expires and the reaper hands the trial back
    late = api.post_result(worker, first["token"], result_for(first["trial"]))
    assert late.status_code == 409
    beat = api.client.post(f"/v1/leases/{first['token']}/heartbeat", json={}, headers=worker[0])
    assert beat.status_code == 409
    second = api.lease(worker)
    assert second is not None and second["trial"]["number"] == 0 and second["trial"]["attempt"] == 2
    time.sleep(1.2)
    trials = all_trials(api, study["id"])
    assert trials[0]["state"] == "failed" and trials[0]["failure_reason"] == "lease expired"
    assert api.run_worker(worker, result_for) == 1  # the study goes on with its next trial
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed" and done["progress"]["failed"] == 1


def test_heartbeat_extends_the_lease(two_second_lease_api: Api) -> None:
    api = two_second_lease_api
    api.create_study(budget={"max_trials": 1}, parallelism=1)
    worker = api.worker()
    held = api.lease(worker)
    assert held is not None
    for _ in range(8):  # 4 s in all: twice the lease
        time.sleep(0.5)
        r = api.client.post(f"/v1/leases/{held['token']}/heartbeat", json={"phase": "measure"}, headers=worker[0])
        assert r.status_code == 200 and r.json()["cancel"] is False
    assert api.post_result(worker, held["token"], result_for(held["trial"])).status_code == 200


def test_pause_resume_cancel(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 10}, parallelism=2)
    sid = study["id"]
    worker = api.worker()
    held = api.lease(worker)
    assert held is not None
    assert api.client.post(f"/v1/studies/{sid}/pause", headers=api.admin).json()["state"] == "paused"
    assert api.lease(worker) is None  # nothing is handed out while paused
    beat = api.client.post(f"/v1/leases/{held['token']}/heartbeat", json={}, headers=worker[0]).json()
    assert beat["cancel"] is False  # trials already running may finish
    again = api.client.post(f"/v1/studies/{sid}/pause", headers=api.admin)
    assert again.status_code == 409 and "running" in again.json()["error"]["message"]
    assert api.client.post(f"/v1/studies/{sid}/resume", headers=api.admin).json()["state"] == "running"
    assert api.lease(worker) is not None
    cancelled = api.client.post(f"/v1/studies/{sid}/cancel", headers=api.admin).json()
    assert cancelled["state"] == "cancelled"
    beat = api.client.post(f"/v1/leases/{held['token']}/heartbeat", json={}, headers=worker[0]).json()
    assert beat["cancel"] is True
    assert api.lease(worker) is None
    states = {t["state"] for t in all_trials(api, sid)}
    assert states <= {"running", "cancelled"}


def test_wall_time_finishes_the_study(fast_expiry_api: Api) -> None:
    api = fast_expiry_api
    study = api.create_study(budget={"max_trials": 100, "wall_time_s": 0.5}, parallelism=2)
    time.sleep(1.0)
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed" and done["finish_reason"] == "wall time limit reached"


@pytest.mark.parametrize("sampler", ["nsga3", "tpe", "random", "grid"])
def test_each_sampler_completes_a_study(api: Api, sampler: str) -> None:
    space = [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "step": 0.25, "default": 0.5},
             {"name": "y", "type": "int", "low": 1, "high": 3, "default": 3}]
    study = api.create_study(space=space, sampler={"name": sampler, "seed": 1}, budget={"max_trials": 40})
    api.run_worker(api.worker(), result_for)
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed"
    expected = 16 if sampler == "grid" else 40  # the baseline, then the grid's 5 x 3 points
    assert done["progress"]["completed"] == expected
    if sampler == "grid":
        configs = {(t["config"]["x"], t["config"]["y"]) for t in all_trials(api, study["id"])}
        assert len(configs) == 15


def test_worker_only_gets_trials_it_can_run(api: Api) -> None:
    api.create_study(budget={"max_trials": 2}, parallelism=1)
    assert api.lease(api.worker(backends=("cpu",))) is None
    assert api.lease(api.worker(backends=("python",), pool="other")) is None
    energy_doc = study_doc(objectives=["f1", "energy_mj"], name="needs energy")
    api.client.post("/v1/studies", json=energy_doc, headers=api.admin)
    worker = api.worker()
    first = api.lease(worker)
    assert first is not None and first["trial"]["objectives"] == ["f1", "f2"]
    assert api.lease(worker) is None  # the energy study's trials wait for a worker with an energy counter


def test_health_metrics_and_openapi(api: Api) -> None:
    api.create_study()
    health = api.client.get("/healthz").json()
    assert health == {"status": "ok", "database": True, "redis": "not configured"}
    metrics = api.client.get("/metrics").text
    assert 'paretune_studies{state="running"} 1.0' in metrics
    assert 'paretune_queue_depth{pool="default"} 4.0' in metrics
    paths = api.client.get("/openapi.json").json()["paths"]
    for path in ("/v1/studies", "/v1/studies/{study_id}/front", "/v1/leases", "/v1/leases/{token}/result",
                 "/v1/workers/register", "/v1/studies/{study_id}/events"):
        assert path in paths


def test_events_stream_trial_changes(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 3}, parallelism=1)
    api.run_worker(api.worker(), result_for)
    text = api.client.get(f"/v1/studies/{study['id']}/events", params={"follow": "false"}, headers=api.admin).text
    trial_events = [block for block in text.split("\n\n") if block.startswith("event: trial")]
    assert len(trial_events) == 3  # each trial's latest state once
    front_trials = api.client.get(f"/v1/studies/{study['id']}/front", headers=api.admin).json()["trials"]
    front = {t["number"] for t in front_trials}
    latest = {json.loads(b.split("data: ", 1)[1])["number"]: json.loads(b.split("data: ", 1)[1])["on_front"]
              for b in trial_events}
    assert {n for n, on in latest.items() if on} == front  # trials pushed off the front were re-sent
    assert "event: end" in text and '"state":"completed"' in text
    last_id = int(trial_events[-1].split("\n")[1].removeprefix("id: "))
    resumed = api.client.get(f"/v1/studies/{study['id']}/events", params={"follow": "false", "after": last_id},
                             headers=api.admin).text
    assert "event: trial" not in resumed


def test_samplers_learn_from_failed_configurations(api: Api) -> None:
    """A configuration that fails to compile is told to the sampler as infeasible, so TPE
    stops proposing its region (it ignores plainly failed trials)."""
    space = [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.25},
             {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}]
    study = api.create_study(space=space, objectives=["f1"], sampler={"name": "tpe", "seed": 3},
                             budget={"max_trials": 60, "max_failed_trials": 60}, parallelism=1)

    def results(trial: dict) -> dict:
        if trial["config"]["x"] > 0.5:
            return {"status": "failed", "failure_reason": "compile_error", "message": "too much shared memory"}
        return result_for(trial)

    api.run_worker(api.worker(), results)
    trials = all_trials(api, study["id"])
    late_failures = sum(t["state"] == "failed" for t in trials[30:])
    early_failures = sum(t["state"] == "failed" for t in trials[1:11])  # TPE's random start-up
    assert early_failures >= 3
    assert late_failures <= 4, [round(t["config"]["x"], 2) for t in trials[30:]]


def test_repeated_proposals_are_refused(api: Api) -> None:
    space = [{"name": "a", "type": "categorical", "choices": [1, 2, 3], "default": 1},
             {"name": "b", "type": "categorical", "choices": ["p", "q", "r"], "default": "p"}]
    study = api.create_study(space=space, objectives=["f1"], sampler={"name": "tpe", "seed": 1},
                             budget={"max_trials": 30}, parallelism=1)
    api.run_worker(api.worker(), lambda t: {"status": "completed", "metrics": {"f1": {"value": t["config"]["a"]}}})
    configs = [(t["config"]["a"], t["config"]["b"]) for t in all_trials(api, study["id"])]
    assert len(configs) == 9 and len(set(configs)) == 9  # the whole 3 x 3 space, each point once
    done = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert done["state"] == "completed" and done["finish_reason"] == "search space exhausted"


def test_parameters_without_defaults_take_the_documents_baseline(api: Api) -> None:
    space = [{"name": "opt", "type": "categorical", "choices": ["-O2", "-O3"]},
             {"name": "unroll", "type": "bool"},
             {"name": "x", "type": "float", "low": 0.1, "high": 1.0, "log": True},
             {"name": "y", "type": "int", "low": 1, "high": 64, "log": True}]
    baseline = {"opt": "-O2", "unroll": False, "x": 0.5, "y": 3}
    study = api.create_study(space=space, baseline=baseline, budget={"max_trials": 6})
    api.run_worker(api.worker(), result_for)
    trials = all_trials(api, study["id"])
    assert trials[0]["config"] == baseline and len(trials) == 6
    for t in trials:
        assert t["config"]["opt"] in ("-O2", "-O3") and isinstance(t["config"]["unroll"], bool)
        assert 0.1 <= t["config"]["x"] <= 1.0 and 1 <= t["config"]["y"] <= 64


def test_gpu_energy_studies_get_a_longer_warm_up_and_hot_window_unless_they_set_them(api: Api) -> None:
    def measure(objectives: list[str], **given: Any) -> dict[str, Any]:
        doc = {"name": "gemm", "kernel": {"backend": "triton", "builtin": "gemm_bf16"}, "objectives": objectives}
        if given:
            doc["measure"] = given
        response = api.client.post("/v1/studies", json=doc, headers=api.admin)
        assert response.status_code == 201, response.text
        return response.json()["document"]["measure"]

    def window(objectives: list[str], **given: Any) -> tuple[float, float]:
        settings = measure(objectives, **given)
        return settings["warmup_s"], settings["hot_window_s"]

    assert window(["runtime_ms"]) == (0.05, 1.0)
    assert window(["runtime_ms", "energy_mj"]) == (2.0, 1.6)
    assert window(["power_w"]) == (2.0, 1.6)
    assert window(["runtime_ms", "energy_mj"], hot_window_s=0.8, warmup_s=0.5) == (0.5, 0.8)
    # the screen keeps a short warm-up: it measures runtime, which settles within a few replays of a busy GPU
    screened = measure(["runtime_ms", "energy_mj"], screen={})
    assert (screened["warmup_s"], screened["screen"]["warmup_s"]) == (2.0, 0.02)
