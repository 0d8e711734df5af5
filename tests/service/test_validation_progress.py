"""Rounds done and left of validations and re-validations, and their ETA, through the HTTP
API on SQLite and Postgres: a scripted worker reports each round's duration in its lease's
heartbeats, round by round, and the ETA is checked against a hand computation from the
durations and stamps the API shows."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from artifact_steps import approved_artifact, completed_study, fingerprint, good_trials, promote, report
from conftest import Api, make_api

from service.artifacts.progress import JobRounds, progress

NOTHING_YET = {"rounds": 9, "done": 0, "left": 9, "round_s": None, "eta_at": None, "eta_s": None}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    yield from make_api(database_url, data_dir=tmp_path)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def beat(api: Api, worker: tuple[dict[str, str], int], token: str, round_s: list[float]) -> Any:
    return api.client.post(f"/v1/leases/{token}/heartbeat", headers=worker[0],
                           json={"phase": f"round {len(round_s) + 1}", "progress": {"round_s": round_s}})


def validation(api: Api, validation_id: int) -> tuple[dict[str, Any], datetime, datetime]:
    """The validation, and the times just before and just after it was read."""
    before = datetime.now(UTC)
    r = api.client.get(f"/v1/validations/{validation_id}", headers=api.admin)
    after = datetime.now(UTC)
    assert r.status_code == 200, r.text
    return r.json(), before, after


def job_end(job: dict[str, Any], mean_round_s: float) -> datetime:
    """A running job's end by hand: its rounds left times its own mean round, from its stamp."""
    own = statistics.fmean(job["round_s"]) if job["round_s"] else mean_round_s
    return at(job["progress_at"]) + timedelta(seconds=(job["rounds"] - job["rounds_done"]) * own)


def test_a_validation_shows_rounds_done_and_left_and_its_eta_round_by_round(api: Api) -> None:
    study, first = completed_study(api)
    headers = api.headers(api.token(kind="worker"))
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "second", "pool": "default", "fingerprint": fingerprint()})
    second = (headers, int(r.json()["worker_id"]))
    number = good_trials(api, study["id"])[0]["number"]
    promoted = promote(api, api.token(role="member"), study["id"], [number], rounds=9).json()
    validation_id, candidate_id = promoted["validation"]["id"], promoted["candidates"][0]["id"]
    assert promoted["validation"]["progress"] == NOTHING_YET == promoted["candidates"][0]["progress"]
    assert [j["rounds"] for j in promoted["validation"]["jobs"]] == [5, 4]

    # the first job leased and one round measured: the queued job counts from now at that round's pace
    a = api.lease(first)
    assert a is not None and a["validation"]["rounds"] == 5
    assert beat(api, first, a["token"], []).status_code == 200  # checking: nothing timed yet
    v, _, _ = validation(api, validation_id)
    assert v["progress"] == NOTHING_YET and v["state"] == "running"
    assert beat(api, first, a["token"], [2.0]).status_code == 200
    v, before, after = validation(api, validation_id)
    job_a, job_b = v["jobs"]
    assert (job_a["state"], job_a["rounds_done"], job_a["round_s"]) == ("running", 1, [2.0])
    assert (job_b["state"], job_b["rounds_done"], job_b["round_s"], job_b["progress_at"]) == ("queued", 0, [], None)
    p = v["progress"]
    assert (p["rounds"], p["done"], p["left"], p["round_s"]) == (9, 1, 8, 2.0)
    assert before + timedelta(seconds=4 * 2.0) <= at(p["eta_at"]) <= after + timedelta(seconds=4 * 2.0)
    assert at(p["eta_at"]) >= job_end(job_a, 2.0)  # job b, started now, ends last

    # both jobs running, each at its own pace
    b = api.lease(second)
    assert b is not None and b["validation"]["rounds"] == 4
    assert beat(api, second, b["token"], [3.0, 5.0]).status_code == 200
    assert beat(api, first, a["token"], [2.0, 2.5, 3.5]).status_code == 200
    v, before, after = validation(api, validation_id)
    job_a, job_b = v["jobs"]
    assert (job_a["rounds_done"], job_b["rounds_done"]) == (3, 2)
    p = v["progress"]
    mean = statistics.fmean([2.0, 2.5, 3.5, 3.0, 5.0])
    assert (p["done"], p["left"]) == (5, 4) and p["round_s"] == pytest.approx(mean, rel=1e-12)
    eta = max(job_end(job_a, mean), job_end(job_b, mean))
    assert abs((at(p["eta_at"]) - eta).total_seconds()) < 1e-3
    assert (eta - after).total_seconds() - 1e-3 <= p["eta_s"] <= (eta - before).total_seconds() + 1e-3

    # the same count again leaves the stamp; more rounds than the job has, or a negative one, are refused
    assert beat(api, first, a["token"], [2.0, 2.5, 3.5]).status_code == 200
    assert validation(api, validation_id)[0]["jobs"][0]["progress_at"] == job_a["progress_at"]
    too_many = beat(api, second, b["token"], [1.0] * 5)
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "progress.round_s"
    assert "4 rounds" in too_many.json()["error"]["message"]
    negative = beat(api, second, b["token"], [1.0, -1.0])
    assert negative.status_code == 422 and negative.json()["error"]["field"].startswith("progress.round_s")
    assert validation(api, validation_id)[0]["jobs"][1]["round_s"] == [3.0, 5.0]

    # the first job reports all its rounds: only the second's are left
    done_a = api.client.post(f"/v1/leases/{a['token']}/validation", headers=first[0],
                             json=report(a["validation"], {candidate_id: 0.8}))
    assert done_a.status_code == 200, done_a.text
    v, _, _ = validation(api, validation_id)
    job_a, job_b = v["jobs"]
    assert job_a["state"] == "completed" and job_a["rounds_done"] == 5
    p = v["progress"]
    assert (p["done"], p["left"]) == (7, 2)
    assert abs((at(p["eta_at"]) - job_end(job_b, p["round_s"])).total_seconds()) < 1e-3
    candidate = api.client.get(f"/v1/candidates/{candidate_id}", headers=api.admin).json()
    assert candidate["progress"]["done"] == 7 and candidate["validation"]["progress"]["left"] == 2

    done_b = api.client.post(f"/v1/leases/{b['token']}/validation", headers=second[0],
                             json=report(b["validation"], {candidate_id: 0.8}))
    assert done_b.status_code == 200, done_b.text
    v, _, _ = validation(api, validation_id)
    assert v["state"] == "completed"
    assert {k: v["progress"][k] for k in ("rounds", "done", "left", "eta_at", "eta_s")} == {
        "rounds": 9, "done": 9, "left": 0, "eta_at": None, "eta_s": None}
    listed = api.client.get(f"/v1/studies/{study['id']}/candidates", headers=api.admin).json()
    assert [(c["state"], c["progress"]["done"], c["progress"]["left"]) for c in listed] == [("validated", 9, 0)]


def test_a_report_with_more_rounds_than_its_job_is_refused(api: Api) -> None:
    study, worker = completed_study(api)
    number = good_trials(api, study["id"])[0]["number"]
    candidate = promote(api, api.token(role="member"), study["id"], [number], rounds=4).json()["candidates"][0]
    held = api.lease(worker)
    assert held is not None
    spec = {**held["validation"], "rounds": 5}
    r = api.client.post(f"/v1/leases/{held['token']}/validation", headers=worker[0],
                        json=report(spec, {candidate["id"]: 0.8}))
    assert r.status_code == 422 and r.json()["error"]["field"] == "rounds"


def test_an_artifact_shows_its_revalidations_progress(api: Api) -> None:
    made = approved_artifact(api)
    artifact_id = made["version"]["artifact_id"]
    assert api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()["revalidations"] == []
    other = api.token(role="approver")
    r = api.client.post(f"/v1/artifacts/{artifact_id}/revalidate", headers=api.headers(other), json={"rounds": 6})
    assert r.status_code == 201, r.text
    assert r.json()["candidates"][0]["progress"]["left"] == 6
    held = api.lease(made["worker"])
    assert held is not None
    assert beat(api, made["worker"], held["token"], [1.5, 2.5]).status_code == 200
    artifact = api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()
    [revalidation] = artifact["revalidations"]
    job = revalidation["validation"]["jobs"][0]
    assert revalidation["state"] == "validating" and revalidation["artifact_id"] == artifact_id
    p = revalidation["progress"]
    assert (p["rounds"], p["done"], p["left"], p["round_s"]) == (6, 2, 4, 2.0)
    assert abs((at(p["eta_at"]) - (at(job["progress_at"]) + timedelta(seconds=8.0))).total_seconds()) < 1e-3
    api.client.post(f"/v1/leases/{held['token']}/validation", headers=made["worker"][0],
                    json=report(held["validation"], {revalidation["id"]: 0.8}))
    [revalidation] = api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()["revalidations"]
    assert revalidation["state"] == "validated" and revalidation["result"]["passed"] is True
    assert (revalidation["progress"]["done"], revalidation["progress"]["left"]) == (6, 0)


def test_progress_by_hand() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    stamp = now - timedelta(seconds=5)
    jobs = [
        JobRounds("completed", 4, 4, [1.0, 1.0, 2.0, 2.0], stamp),
        JobRounds("failed", 4, 1, [6.0], stamp),  # its three rounds not measured are dropped
        JobRounds("running", 6, 2, [3.0, 5.0], stamp),  # 4 left at 4 s: stamp + 16 s
        JobRounds("running", 3, 0, [], None),  # checking: 3 at the mean 20/7 s, from now
        JobRounds("queued", 2, 0, [], None),
    ]
    p = progress(jobs, now)
    assert (p.rounds, p.done, p.left) == (19, 7, 9)
    assert p.round_s == pytest.approx(20 / 7)
    assert p.eta_at == stamp + timedelta(seconds=16) and p.eta_s == pytest.approx(11.0)
    assert progress(jobs[2:3], stamp + timedelta(seconds=17)).eta_s == 0.0  # overdue: any moment now
    untimed = progress([JobRounds("queued", 5, 0, [], None)], now)
    assert (untimed.left, untimed.round_s, untimed.eta_at, untimed.eta_s) == (5, None, None, None)
    finished = progress(jobs[:2], now)
    assert (finished.left, finished.eta_at) == (0, None) and finished.round_s == pytest.approx(2.4)
