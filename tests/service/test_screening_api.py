"""Studies that screen, through the HTTP API on SQLite and Postgres, answered by scripted
workers: every trial is screened, promoted trials come back through the lease queue for
their full stage (to whichever worker leases them), screened-out trials keep their screening
values apart, and the front, best, ratios and what the sampler hears are checked against
independent computations."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
from conftest import Api
from sqlalchemy import func, select

from service.scheduling import promotion, screening
from service.store.models import PoolUsage
from service.studies.document import Promote, ResolvedObjective

SPACE = [
    {"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5},
    {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3},
]
RT_E = [{"name": "runtime_ms", "direction": "minimize"}, {"name": "energy_mj", "direction": "minimize"}]


def truth(config: dict[str, Any]) -> dict[str, float]:
    """A kernel whose higher y trades time for power: slower by 5% a step at 30 W less, so
    the front runs from the fastest (y=1) to the most frugal (y=10) at x=0, 1.45x apart;
    x slows everything at the same power."""
    x, k = float(config["x"]), int(config["y"]) - 1
    runtime = (1.0 + 3.0 * x) * (1.0 + 0.05 * k)
    return {"runtime_ms": runtime, "energy_mj": (700.0 - 30.0 * k) * runtime}


def _noise(config: dict[str, Any], stage: str, name: str, scale: float) -> float:
    digest = hashlib.sha256(f"{sorted(config.items())}{stage}{name}".encode()).digest()
    return 1.0 + scale * (digest[0] / 255.0 * 2.0 - 1.0)


def scripted(leases: list[dict[str, Any]]):
    """Results as a worker measuring `truth` would give them: each stage measures what its
    lease names, the screen within 1% (interval +-1%), the full stage within 0.5%."""

    def answer(trial: dict[str, Any]) -> dict[str, Any]:
        leases.append(trial)
        stage = trial["stage"] or "full"
        scale = 0.01 if stage == "screen" else 0.005
        metrics = {}
        for name in trial["objectives"]:
            value = truth(trial["config"])[name] * _noise(trial["config"], stage, name, scale)
            metrics[name] = {"value": value, "ci_low": value * (1 - scale), "ci_high": value * (1 + scale)}
        return {"status": "completed", "metrics": metrics, "timings": {"measure_s": 0.2 if stage == "screen" else 1.6}}

    return answer


def energy_worker(api: Api) -> tuple[dict[str, str], int]:
    """A worker that can read an energy counter (the full stage of an energy study needs one)."""
    headers = api.headers(api.token(kind="worker"))
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "w", "pool": "default", "fingerprint": {"backends": ["python"], "energy": True}})
    assert r.status_code == 201, r.text
    return headers, int(r.json()["worker_id"])


def _trials(api: Api, study_id: int) -> list[dict[str, Any]]:
    items = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000}, headers=api.admin).json()["items"]
    return [api.client.get(f"/v1/studies/{study_id}/trials/{t['number']}", headers=api.admin).json() for t in items]


def _alternate(api: Api, workers: list[tuple[dict[str, str], int]], answer: Any, study_id: int) -> None:
    """Two workers take the queue's trials in a seeded random order until the study has
    finished (strict turns could line up with the queue so that a trial's screen and full
    stage always fall to the same worker)."""
    api.run_workers(workers, answer)
    assert api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()["state"] == "completed"


def test_a_screening_study_measures_fully_only_what_can_reach_the_front(api: Api) -> None:
    study = api.create_study(
        space=SPACE, objectives=RT_E, kernel={"backend": "python", "source": "tests.fake:objective"},
        sampler={"name": "random", "seed": 3}, budget={"max_trials": 40}, parallelism=3,
        measure={"screen": {}},
    )
    assert study["document"]["measure"]["screen"]["objectives"] == ["runtime_ms"]
    assert study["document"]["measure"]["promote"] == {"margins": {"runtime_ms": 0.04}, "energy_runtime_ratio": 2.5}
    leases: list[dict[str, Any]] = []
    workers = [energy_worker(api), energy_worker(api)]
    _alternate(api, workers, scripted(leases), study["id"])

    trials = _trials(api, study["id"])
    study = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    by_number = {t["number"]: t for t in trials}
    completed = [t for t in trials if t["state"] == "completed"]
    screened_out = [t for t in trials if t["state"] == "screened_out"]
    assert len(completed) + len(screened_out) == len(trials) == 40
    assert completed and len(screened_out) >= 5, [t["state"] for t in trials]
    progress = study["progress"]
    assert (progress["completed"], progress["screened_out"], progress["in_flight"]) == (
        len(completed), len(screened_out), 0)

    # every trial was screened first, with the screen's settings and objectives; only the
    # promoted came back, once, for the full stage, with the study's
    stages: dict[int, list[str]] = {}
    for lease in leases:
        stages.setdefault(lease["number"], []).append(lease["stage"])
        if lease["stage"] == "screen":
            assert lease["objectives"] == ["runtime_ms"]
            assert (lease["measure"]["hot_window_s"], lease["measure"]["cold_samples"]) == (0.2, 50)
        else:
            assert lease["objectives"] == ["runtime_ms", "energy_mj"]
            assert lease["measure"]["cold_samples"] is None and lease["measure"]["hot_window_s"] == 1.0
    for t in completed:
        assert stages[t["number"]] == ["screen", "full"] and t["stage"] == "full"
        assert t["screening"]["promoted"] is True and t["values"] is not None
    for t in screened_out:
        assert stages[t["number"]] == ["screen"] and t["stage"] == "screen"
        assert t["values"] is None and t["relative"] is None and not t["on_front"]
        assert t["screening"]["promoted"] is False and set(t["screening"]["values"]) == {"runtime_ms"}
    # the full stage may go to another worker than the screen
    assert any(t["screening"]["worker_id"] != t["worker_id"] for t in completed)
    assert by_number[0]["is_baseline"] and by_number[0]["state"] == "completed"

    # a screened-out trial was beaten, by the rule, by a fully measured trial's screening
    rule = screening.Rule.of(Promote(margins={"runtime_ms": 0.04}, energy_runtime_ratio=2.5))
    objectives = [ResolvedObjective.model_validate(o) for o in RT_E]
    for t in screened_out:
        member_row = by_number[t["screening"]["dominated_by"]]
        assert member_row["state"] == "completed"
        member = screening.Member(member_row["number"], member_row["values"],
                                  promotion.intervals(member_row["screening"]))
        assert all(screening.beats(o, member, promotion.intervals(t["screening"]), rule) for o in objectives)
        assert t["screening"]["told"]["runtime_ms"] == t["screening"]["values"]["runtime_ms"]

    # nothing on the front of the true values (over every trial created) was screened out
    true_front = _front_numbers([(t["number"], tuple(truth(t["config"]).values())) for t in trials])
    assert all(by_number[n]["state"] == "completed" for n in true_front)

    # the front, best and ratios use the full stage's values only
    front = api.client.get(f"/v1/studies/{study['id']}/front", headers=api.admin).json()
    expected = _front_numbers([(t["number"], (t["values"]["runtime_ms"], t["values"]["energy_mj"])) for t in completed])
    assert {t["number"] for t in front["trials"]} == expected
    assert all(t["state"] == "completed" and t["stage"] == "full" for t in front["trials"])
    for name in ("runtime_ms", "energy_mj"):
        assert study["best"][name] == min(t["values"][name] for t in completed)
        assert study["baseline"][name] == by_number[0]["values"][name]
    for t in completed:
        assert t["relative"]["runtime_ms"] == pytest.approx(t["values"]["runtime_ms"] / study["baseline"]["runtime_ms"])
    sorted_page = api.client.get(f"/v1/studies/{study['id']}/trials", params={"sort": "runtime_ms", "limit": 1000},
                                 headers=api.admin).json()["items"]
    assert {t["number"] for t in sorted_page} == {t["number"] for t in completed}


def _front_numbers(points: list[tuple[int, tuple[float, ...]]]) -> set[int]:
    return {n for n, p in points
            if not any(all(a <= b for a, b in zip(q, p, strict=True)) and q != p for _, q in points)}


def test_the_sampler_hears_full_values_once_and_screened_out_trials_as_told(api: Api) -> None:
    study = api.create_study(
        space=SPACE, objectives=RT_E, kernel={"backend": "python", "source": "tests.fake:objective"},
        sampler={"name": "nsga2", "seed": 5, "options": {"population_size": 6}}, budget={"max_trials": 24},
        parallelism=2, measure={"screen": {}, "promote": {"energy_runtime_ratio": 1.3}},
    )
    leases: list[dict[str, Any]] = []
    api.run_worker(energy_worker(api), scripted(leases))
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    trials = {t["id"]: t for t in _trials(api, study["id"])}
    assert {t["state"] for t in trials.values()} == {"completed", "screened_out"}

    def heard(mirror: Any) -> dict[int, tuple[str, list[float] | None]]:
        out = {}
        for trial_id, optuna_id in mirror.ids.items():
            frozen = mirror.storage.get_trial(optuna_id)
            out[trial_id] = (frozen.state.name, frozen.values)
        return out

    with state.db.read() as session:
        from service.store.models import Study

        row = session.get(Study, study["id"])
        live = heard(state.cache.get(session, row))
        state.cache.drop(study["id"])
        rebuilt = heard(state.cache.get(session, row))
    assert live == rebuilt  # a mirror rebuilt from the table hears the same
    assert set(live) == set(trials)
    for trial_id, (optuna_state, values) in live.items():
        t = trials[trial_id]
        assert optuna_state == "COMPLETE"
        if t["state"] == "completed":
            assert values == [t["values"]["runtime_ms"], t["values"]["energy_mj"]]
        else:  # its screened runtime, and energy at the power of the trial that beat it
            told = t["screening"]["told"]
            assert values == [told["runtime_ms"], told["energy_mj"]]
            member = next(m for m in trials.values() if m["number"] == t["screening"]["dominated_by"])
            power = member["values"]["energy_mj"] / member["screening"]["values"]["runtime_ms"]
            assert told["energy_mj"] == pytest.approx(power * told["runtime_ms"])
            assert told["runtime_ms"] > 1.3 * member["screening"]["intervals"]["runtime_ms"][1]
    assert math.isfinite(sum(v for _, vs in live.values() for v in vs or []))


def test_pause_resume_and_cancel_while_screened(api: Api) -> None:
    study = api.create_study(space=SPACE, objectives=RT_E,
                             kernel={"backend": "python", "source": "tests.fake:objective"},
                             sampler={"name": "random", "seed": 1}, budget={"max_trials": 6}, parallelism=2,
                             measure={"screen": {}})
    sid = study["id"]
    worker = energy_worker(api)
    answer = scripted([])
    baseline = api.lease(worker)
    assert baseline is not None and baseline["trial"]["number"] == 0 and baseline["trial"]["stage"] == "screen"
    assert api.post_result(worker, baseline["token"], answer(baseline["trial"])).status_code == 200
    # a duplicate of the screen's result, before the step, is acknowledged as one
    again = api.post_result(worker, baseline["token"], answer(baseline["trial"]))
    assert again.status_code == 200 and again.json()["duplicate"] is True, again.text
    assert api.client.post(f"/v1/studies/{sid}/pause", headers=api.admin).status_code == 200
    api.quiesce()
    number0 = api.client.get(f"/v1/studies/{sid}/trials/0", headers=api.admin).json()
    assert (number0["state"], number0["stage"], number0["screening"]["promoted"]) == ("paused", "full", True)
    assert api.lease(worker) is None
    assert api.client.post(f"/v1/studies/{sid}/resume", headers=api.admin).status_code == 200
    api.quiesce()
    full = api.lease(worker)
    assert full is not None and full["trial"]["number"] == 0 and full["trial"]["stage"] == "full"
    assert full["trial"]["attempt"] == 1  # attempts count afresh for the full stage
    assert api.post_result(worker, full["token"], answer(full["trial"])).status_code == 200
    api.quiesce()
    screen = api.lease(worker)
    assert screen is not None and screen["trial"]["stage"] == "screen"
    assert api.post_result(worker, screen["token"], answer(screen["trial"])).status_code == 200
    assert api.client.post(f"/v1/studies/{sid}/cancel", headers=api.admin).status_code == 200
    api.quiesce()
    cancelled = api.client.get(f"/v1/studies/{sid}/trials/{screen['trial']['number']}", headers=api.admin).json()
    assert cancelled["state"] == "cancelled" and cancelled["screening"]["values"]["runtime_ms"] > 0
    body = api.client.get(f"/v1/studies/{sid}", headers=api.admin).json()
    assert body["progress"]["completed"] == 1 and body["progress"]["in_flight"] == 0


def test_screens_before_the_first_front_wait_for_it_instead_of_being_promoted(api: Api) -> None:
    """While the baseline's full stage runs, the study has no front: the trials screened
    meanwhile stay undecided (not promoted for want of a front), and are decided against the
    baseline once it completes; their screens count once in the pool's usage."""
    study = api.create_study(space=SPACE, objectives=RT_E,
                             kernel={"backend": "python", "source": "tests.fake:objective"},
                             sampler={"name": "random", "seed": 5}, budget={"max_trials": 3}, parallelism=3,
                             measure={"screen": {}, "promote": {"energy_runtime_ratio": 1.0}})
    sid = study["id"]
    worker = energy_worker(api)
    answer = scripted([])
    baseline = api.lease(worker)
    assert baseline is not None and baseline["trial"]["stage"] == "screen"
    assert api.post_result(worker, baseline["token"], answer(baseline["trial"])).status_code == 200
    api.quiesce()
    held = [api.lease(worker) for _ in range(3)]
    assert all(h is not None for h in held)
    full = next(h for h in held if h["trial"]["number"] == 0)
    screens = [h for h in held if h["trial"]["number"] != 0]
    assert full["trial"]["stage"] == "full" and [h["trial"]["stage"] for h in screens] == ["screen", "screen"]
    for h in screens:
        assert api.post_result(worker, h["token"], answer(h["trial"])).status_code == 200
    api.quiesce()  # returns: an undecided trial is no change for the steps that find it again
    for h in screens:
        trial = api.client.get(f"/v1/studies/{sid}/trials/{h['trial']['number']}", headers=api.admin).json()
        assert trial["state"] == "screened" and trial["screening"]["deferred"] is True
        assert trial["screening"]["promoted"] is None
    assert api.post_result(worker, full["token"], answer(full["trial"])).status_code == 200
    api.quiesce()
    base = api.client.get(f"/v1/studies/{sid}/trials/0", headers=api.admin).json()
    rule = screening.Rule.of(Promote(margins={"runtime_ms": 0.04}, energy_runtime_ratio=1.0))
    objectives = [ResolvedObjective.model_validate(o) for o in RT_E]
    member = screening.Member(0, base["values"], promotion.intervals(base["screening"]))
    for h in screens:
        trial = api.client.get(f"/v1/studies/{sid}/trials/{h['trial']['number']}", headers=api.admin).json()
        beaten = all(screening.beats(o, member, promotion.intervals(trial["screening"]), rule) for o in objectives)
        assert trial["screening"]["promoted"] is not beaten
        assert trial["state"] == ("screened_out" if beaten else "queued")
        assert trial["screening"]["dominated_by"] == (0 if beaten else None)
    with api.client.app.state.paretune.db.read() as session:  # type: ignore[attr-defined]
        counted = session.execute(select(func.sum(PoolUsage.trials)).where(PoolUsage.study_id == sid)).scalar()
    assert counted == 4  # three screens and the baseline's full stage, each once


def test_a_study_without_a_screen_leases_as_before(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 3})
    worker = api.worker()
    held = api.lease(worker)
    assert held is not None and held["trial"]["stage"] is None
    assert held["trial"]["objectives"] == ["f1", "f2"]
    assert "screen" not in study["document"]["measure"] and "promote" not in study["document"]["measure"]
    trial = api.client.get(f"/v1/studies/{study['id']}/trials/0", headers=api.admin).json()
    assert trial["stage"] is None and trial["screening"] is None


@pytest.mark.parametrize(("measure", "objectives", "field"), [
    ({"screen": {}}, [{"name": "runtime_ms"}, {"name": "power_w"}], "measure.screen.objectives"),
    ({"promote": {"energy_runtime_ratio": 2.0}}, [{"name": "runtime_ms"}], "measure.promote"),
    ({"screen": {"cold_samples": 0}}, [{"name": "runtime_ms"}], "measure.screen.cold_samples"),
    ({"screen": {"objectives": ["runtime_ms"]}, "promote": {"margins": {"energy_mj": 0.1}}},
     [{"name": "runtime_ms"}], "measure.promote.margins.energy_mj"),
])
def test_a_screen_that_cannot_work_is_a_422_naming_the_field(api: Api, measure, objectives, field) -> None:
    doc = {"name": "bad screen", "kernel": {"backend": "cpu", "builtin": "matmul"}, "objectives": objectives,
           "measure": measure}
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert field in [error.get("field"), *[e["field"] for e in error.get("errors") or []]], error
