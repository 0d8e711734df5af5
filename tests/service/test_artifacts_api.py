"""The artifact workflow through the HTTP API on SQLite and Postgres: promotion queues a
validation through the lease queue (split over the pool's live workers), its reports are
judged against an independent reference (the known ratio of the scripted rounds), approval
needs an approver other than the promoter and signs an immutable version; supersede,
rollback, revoke, rejection and the audit log; staleness, re-validation and warm start."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from artifact_steps import (
    TARGET,
    approved_artifact,
    completed_study,
    fingerprint,
    good_trials,
    promote,
    report,
    run_validations,
)
from conftest import Api, make_api, study_doc
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from service.artifacts.validations import split_rounds
from service.store.models import ArtifactVersion
from wire.artifact import ArtifactVerificationError, VerificationFailure, verify

T_975 = {5: 2.5706}  # Student's t, 97.5% quantile, by degrees of freedom (printed tables)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    yield from make_api(database_url, data_dir=tmp_path)  # the signing key lives there


def test_rounds_are_split_over_live_workers() -> None:
    assert split_rounds(20, 1) == [20]
    assert split_rounds(20, 3) == [7, 7, 6]
    assert split_rounds(5, 4) == [3, 2]  # no job below two rounds
    assert split_rounds(40, 50) == [5] * 8  # at most eight jobs
    for rounds in range(2, 60):
        for workers in range(1, 12):
            blocks = split_rounds(rounds, workers)
            assert sum(blocks) == rounds and min(blocks) >= 2 and max(blocks) - min(blocks) <= 1


def audit(api: Api, **params: object) -> list[dict]:
    r = api.client.get("/v1/audit", params=params, headers=api.admin)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_promote_validate_approve_supersede_rollback_revoke(api: Api) -> None:
    study, worker = completed_study(api)
    member, viewer = api.token(role="member"), api.token(role="viewer")
    approver_a, approver_b = api.token(role="approver"), api.token(role="approver")
    first, second, third = (t["number"] for t in good_trials(api, study["id"])[:3])
    trials = {t["number"]: t for t in good_trials(api, study["id"])}

    assert promote(api, viewer, study["id"], [first]).status_code == 403
    assert promote(api, member, study["id"], [0]).status_code == 409  # the baseline
    missing = promote(api, member, study["id"], [999])
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "trials.0"
    r = promote(api, member, study["id"], [first], note="fastest f1")
    assert r.status_code == 201, r.text
    candidate = r.json()["candidates"][0]
    assert candidate["state"] == "validating" and candidate["config"] == trials[first]["config"]
    assert promote(api, member, study["id"], [first]).status_code == 409  # a candidate already
    early = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=api.headers(approver_a))
    assert early.status_code == 409 and "not finished" in early.json()["error"]["message"]

    # the job through the lease queue: the baseline trial's configuration against the candidate's
    held = api.lease(worker)
    assert held is not None and held["validation"] is not None
    spec = held["validation"]
    baseline = next(t for t in api.client.get(f"/v1/studies/{study['id']}/trials", headers=api.admin)
                    .json()["items"] if t["is_baseline"])
    assert spec["baseline"] == baseline["config"] and spec["rounds"] == 6
    assert [c["config"] for c in spec["candidates"]] == [trials[first]["config"]]
    assert spec["objectives"] == ["f1", "f2"]
    body = report(spec, {candidate["id"]: 0.8})
    posted = api.client.post(f"/v1/leases/{held['token']}/validation", json=body, headers=worker[0])
    assert posted.status_code == 200 and posted.json()["state"] == "completed"
    again = api.client.post(f"/v1/leases/{held['token']}/validation", json=body, headers=worker[0])
    assert again.status_code == 200 and again.json()["duplicate"] is True

    detail = api.client.get(f"/v1/candidates/{candidate['id']}", headers=api.headers(viewer)).json()
    assert detail["state"] == "validated" and detail["validation"]["state"] == "completed"
    for metric in detail["result"]["metrics"]:  # against the paired t interval computed here
        name = metric["objective"]
        d = [math.log(c / b) for b, c in zip(body["baseline"]["values"][name],
                                             body["candidates"][0]["values"][name], strict=True)]
        mean, half = statistics.fmean(d), T_975[5] * statistics.stdev(d) / math.sqrt(6)
        assert metric["rounds"] == 6 and metric["ratio"] == pytest.approx(math.exp(mean), rel=1e-9)
        assert metric["ci_low"] == pytest.approx(math.exp(mean - half), rel=1e-4)
        assert metric["ci_high"] == pytest.approx(math.exp(mean + half), rel=1e-4)
        assert abs(metric["ratio"] - 0.8) < 0.02 and metric["ci_high"] < 1.0
        assert metric["significant"] and metric["verdict"] == "better"
    raw = api.client.get(f"/v1/validations/{detail['validation_id']}", params={"samples": "true"},
                         headers=api.admin).json()
    assert raw["jobs"][0]["report"]["baseline"]["values"]["f1"] == body["baseline"]["values"]["f1"]

    assert api.client.post(f"/v1/candidates/{candidate['id']}/approve",
                           headers=api.headers(member)).status_code == 403  # a member is no approver
    r = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=api.headers(approver_a),
                        json={"why": "20% faster"})
    assert r.status_code == 201, r.text
    v1 = r.json()
    assert v1["version"] == 1 and v1["state"] == "current"
    key = api.client.get("/v1/artifacts/public-key").json()
    document = verify(v1["file"].encode(), key["pem"])
    assert document.controls.config == trials[first]["config"]
    assert document.target.model_dump(exclude_none=True) == TARGET
    assert document.provenance.candidate_id == candidate["id"] and document.supersedes is None
    assert document.metrics[0].ratio == pytest.approx(detail["result"]["metrics"][0]["ratio"])
    artifact_id = v1["artifact_id"]

    # the promoter cannot approve their own candidate, another approver can: it supersedes v1
    r = promote(api, approver_a, study["id"], [second])
    own = r.json()["candidates"][0]
    run_validations(api, worker, ratio=0.7)
    refused = api.client.post(f"/v1/candidates/{own['id']}/approve", headers=api.headers(approver_a))
    assert refused.status_code == 403 and "second person" in refused.json()["error"]["message"]
    v2 = api.client.post(f"/v1/candidates/{own['id']}/approve", headers=api.headers(approver_b)).json()
    assert v2["version"] == 2 and verify(v2["file"].encode(), key["pem"]).supersedes == 1
    versions = api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()["versions"]
    assert [(v["version"], v["state"]) for v in versions] == [(1, "superseded"), (2, "current")]

    resolved = api.client.get("/v1/artifacts/resolve", headers=api.headers(viewer), params={
        "kernel": "zdt", "gpu": TARGET["cpu"], "toolchain": f"cc={TARGET['cc']}"}).json()
    assert resolved["version"] == 2 and resolved["match"] == {"exact": True, "differences": {}}
    assert resolved["file"] == v2["file"]

    # rollback restores v1; the file served is v1's, byte for byte
    r = api.client.post(f"/v1/artifacts/{artifact_id}/rollback", json={"version": 1, "why": "regression"},
                        headers=api.headers(approver_b))
    assert r.status_code == 200 and r.json()["state"] == "current"
    assert api.client.post(f"/v1/artifacts/{artifact_id}/rollback", json={"version": 1},
                           headers=api.headers(approver_b)).status_code == 409
    nearest = api.client.get("/v1/artifacts/resolve", headers=api.headers(viewer), params={
        "kernel": "zdt", "gpu": TARGET["cpu"], "toolchain": "cc=gcc 14.1"}).json()
    assert nearest["version"] == 1 and nearest["file"] == v1["file"]
    assert nearest["match"] == {"exact": False, "differences": {"cc": [TARGET["cc"], "gcc 14.1"]}}
    other = api.client.get("/v1/artifacts/resolve", headers=api.admin, params={"kernel": "zdt", "gpu": "Other"})
    assert other.status_code == 404 and other.json()["error"]["field"] == "gpu"

    # nothing is edited after approval: not through the API, not in the database
    for method in ("PUT", "PATCH"):
        edit = api.client.request(method, f"/v1/artifacts/{artifact_id}/versions/1", headers=api.admin,
                                  json={"document": {"controls": {}}})
        assert edit.status_code == 409 and "immutable" in edit.json()["error"]["message"]
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with pytest.raises(DBAPIError, match="cannot be changed"), state.db.write() as session:
        session.execute(update(ArtifactVersion).where(ArtifactVersion.version == 1).values(file=v1["file"] + " "))
    served = api.client.get(f"/v1/artifacts/{artifact_id}/versions/1/file", headers=api.admin)
    assert served.content == v1["file"].encode() and served.headers["x-artifact-sha256"] == v1["sha256"]
    tampered = bytearray(served.content)
    tampered[tampered.index(b'"f1"') + 1] = ord("g")
    with pytest.raises(ArtifactVerificationError) as caught:
        verify(bytes(tampered), key["pem"])
    assert caught.value.reason == VerificationFailure.CONTENT_CHANGED

    # revoke; a wrong candidate fails validation, cannot be approved, and is rejected
    assert api.client.post(f"/v1/artifacts/{artifact_id}/versions/2/revoke", json={"why": "bad"},
                           headers=api.headers(approver_a)).json()["state"] == "revoked"
    assert api.client.post(f"/v1/artifacts/{artifact_id}/rollback", json={"version": 2},
                           headers=api.headers(approver_a)).status_code == 409
    wrong = promote(api, member, study["id"], [third]).json()["candidates"][0]
    run_validations(api, worker, wrong=frozenset({wrong["id"]}))
    detail = api.client.get(f"/v1/candidates/{wrong['id']}", headers=api.admin).json()
    assert detail["state"] == "failed" and detail["result"]["correct"] is False
    assert [s["passed"] for s in detail["result"]["correctness"]] == [True, False]
    refused = api.client.post(f"/v1/candidates/{wrong['id']}/approve", headers=api.headers(approver_a))
    assert refused.status_code == 409 and "cannot be approved" in refused.json()["error"]["message"]
    assert api.client.post(f"/v1/candidates/{wrong['id']}/reject", json={"why": "wrong on odd sizes"},
                           headers=api.headers(approver_a)).json()["state"] == "rejected"

    actions = [(e["action"], e["subject_type"]) for e in reversed(audit(api))]
    assert actions == [
        ("promote", "candidate"), ("validated", "candidate"), ("approve", "artifact"), ("approve", "candidate"),
        ("promote", "candidate"), ("validated", "candidate"), ("supersede", "artifact"), ("approve", "artifact"),
        ("approve", "candidate"), ("rollback", "artifact"), ("revoke", "artifact"), ("promote", "candidate"),
        ("validation_failed", "candidate"), ("reject", "candidate"),
    ]
    on_artifact = audit(api, subject_type="artifact", subject_id=artifact_id)
    assert [e["action"] for e in on_artifact] == ["revoke", "rollback", "approve", "supersede", "approve"]
    assert on_artifact[1]["why"] == "regression" and on_artifact[1]["details"]["version"] == 1
    assert {e["actor"] for e in audit(api, action="approve")} == {"t"}  # test tokens are all named t
    assert api.client.get("/v1/audit", params={"action": "nope"}, headers=api.admin).json()["error"]["field"] == \
        "action"

    # another team sees none of it
    beta = api.headers(api.token(role="admin", team="beta"))
    assert api.client.get(f"/v1/artifacts/{artifact_id}", headers=beta).status_code == 404
    assert api.client.get(f"/v1/candidates/{wrong['id']}", headers=beta).status_code == 404
    assert api.client.get("/v1/artifacts", headers=beta).json() == []
    assert api.client.get("/v1/audit", headers=beta).json() == []


def test_two_workers_split_a_validation_into_two_jobs(api: Api) -> None:
    study, worker = completed_study(api)
    headers = api.headers(api.token(kind="worker"))
    r = api.client.post("/v1/workers/register", headers=headers,
                        json={"name": "second", "pool": "default", "fingerprint": fingerprint()})
    assert r.status_code == 201
    member, approver = api.token(role="member"), api.token(role="approver")
    numbers = [t["number"] for t in good_trials(api, study["id"])[:2]]
    r = promote(api, member, study["id"], numbers, rounds=9)
    assert [j["rounds"] for j in r.json()["validation"]["jobs"]] == [5, 4]
    specs = run_validations(api, worker, ratio=0.9)
    assert sorted(s["rounds"] for s in specs) == [4, 5] and len({s["job_id"] for s in specs}) == 2
    for candidate in r.json()["candidates"]:
        detail = api.client.get(f"/v1/candidates/{candidate['id']}", headers=api.admin).json()
        metric = detail["result"]["metrics"][0]
        assert metric["jobs"] == 2 and metric["rounds"] == 9 and abs(metric["ratio"] - 0.9) < 0.02
        assert metric["ci_low"] < metric["ratio"] < metric["ci_high"] < 1.0
    ok = api.client.post(f"/v1/candidates/{r.json()['candidates'][1]['id']}/approve", headers=api.headers(approver))
    assert ok.status_code == 201 and len(ok.json()["document"]["provenance"]["worker_fingerprints"]) == 2


def test_a_new_compiler_marks_stale_and_revalidation_makes_a_new_version(api: Api) -> None:
    made = approved_artifact(api)
    artifact_id = made["version"]["artifact_id"]
    worker_token = api.token(kind="worker")
    for cpu in ("Another CPU", TARGET["cpu"]):  # only a worker of the artifact's device counts
        r = api.client.post("/v1/workers/register", headers=api.headers(worker_token),
                            json={"name": cpu, "pool": "default", "fingerprint": fingerprint("gcc 13.1.0", cpu)})
        assert r.status_code == 201
        artifact = api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()
        assert artifact["stale"] is (cpu == TARGET["cpu"])
    assert "cc 'gcc 13.1.0' (artifact: 'gcc 12.2.0')" in artifact["stale_reason"]
    assert artifact["versions"][0]["stale"] is True
    resolved = api.client.get("/v1/artifacts/resolve", headers=api.admin,
                              params={"kernel": "zdt", "gpu": TARGET["cpu"]}).json()
    assert resolved["stale"] is True and resolved["version"] == 1  # still served, flagged
    assert api.client.get("/v1/artifacts", params={"stale": "true"}, headers=api.admin).json()[0]["id"] == artifact_id
    assert audit(api, action="stale")[0]["subject_id"] == artifact_id

    member = api.headers(made["member"])
    assert api.client.post(f"/v1/artifacts/{artifact_id}/revalidate", headers=member).status_code == 403
    r = api.client.post(f"/v1/artifacts/{artifact_id}/revalidate", headers=api.headers(made["approver"]),
                        json={"note": "new compiler", "rounds": 4})
    assert r.status_code == 201, r.text
    candidate = r.json()["candidates"][0]
    assert candidate["artifact_id"] == artifact_id and candidate["config"] == made["candidate"]["config"]
    run_validations(api, made["worker"], ratio=0.85)  # on the same toolchain again: the same target
    other = api.token(role="approver")
    v2 = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=api.headers(other))
    assert v2.status_code == 201 and v2.json()["version"] == 2 and v2.json()["artifact_id"] == artifact_id
    artifact = api.client.get(f"/v1/artifacts/{artifact_id}", headers=api.admin).json()
    assert artifact["stale"] is False and artifact["current_version"] == 2

    # re-validated on the new compiler: a version of the new target, which resolves exactly there
    r = api.client.post(f"/v1/artifacts/{artifact_id}/revalidate", headers=api.headers(made["approver"]))
    new_target = {**TARGET, "cc": "gcc 13.1.0"}
    run_validations(api, made["worker"], target=new_target)
    v = api.client.post(f"/v1/candidates/{r.json()['candidates'][0]['id']}/approve", headers=api.headers(other))
    assert v.status_code == 201 and v.json()["artifact_id"] != artifact_id and v.json()["version"] == 1
    resolved = api.client.get("/v1/artifacts/resolve", headers=api.admin, params={
        "kernel": "zdt", "gpu": TARGET["cpu"], "toolchain": "cc=gcc 13.1.0"}).json()
    assert resolved["artifact_id"] == v.json()["artifact_id"] and resolved["match"]["exact"] is True
    assert len(api.client.get("/v1/artifacts", params={"toolchain": "cc=gcc 13.1.0"}, headers=api.admin).json()) == 1


def test_a_pool_that_revalidates_by_itself(api: Api) -> None:
    made = approved_artifact(api)
    r = api.client.put("/v1/pools/default", json={"min_isolation": "none", "auto_revalidate": True},
                       headers=api.admin)
    assert r.status_code == 200 and r.json()["auto_revalidate"] is True
    r = api.client.post("/v1/workers/register", headers=api.headers(api.token(kind="worker")),
                        json={"name": "new", "pool": "default", "fingerprint": fingerprint("gcc 13.1.0")})
    assert r.status_code == 201
    listed = api.client.get(f"/v1/studies/{made['study']['id']}/candidates", headers=api.admin).json()
    automatic = listed[0]
    assert automatic["state"] == "validating" and automatic["promoted_by"] == "service"
    assert automatic["artifact_id"] == made["version"]["artifact_id"]
    run_validations(api, made["worker"])
    # promoted by the service: any approver may approve it, the one who approved v1 included
    r = api.client.post(f"/v1/candidates/{automatic['id']}/approve", headers=api.headers(made["approver"]))
    assert r.status_code == 201 and r.json()["version"] == 2


def test_warm_start_takes_the_approved_configuration_first(api: Api) -> None:
    made = approved_artifact(api)
    approved = made["version"]["document"]["controls"]["config"]
    r = api.client.post("/v1/studies", json=study_doc(name="zdt", warm_start="catalog"), headers=api.admin)
    assert r.status_code == 201, r.text
    assert r.json()["document"]["warm_start_configs"] == [approved]
    api.quiesce()
    trials = api.client.get(f"/v1/studies/{r.json()['id']}/trials", headers=api.admin).json()["items"]
    by_number = {t["number"]: t["config"] for t in trials}
    assert by_number[1] == approved and by_number[0] != approved
    cold = api.client.post("/v1/studies", json=study_doc(name="other kernel", warm_start="catalog"),
                           headers=api.admin)
    assert cold.json()["document"]["warm_start_configs"] == []  # nothing approved for it
    bad = api.client.post("/v1/studies", json=study_doc(warm_start="everything"), headers=api.admin)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "warm_start"


def test_the_migration_goes_down_and_up_again(database_url: str) -> None:
    from alembic import command
    from sqlalchemy import inspect

    from service.store.db import Database
    from service.store.migrate import alembic_config, upgrade

    db = Database(database_url)
    try:
        upgrade(db.engine)
        tables = {"candidates", "validations", "validation_jobs", "artifacts", "artifact_versions", "audit_log"}
        assert tables <= set(inspect(db.engine).get_table_names())
        config = alembic_config(db.engine.url.render_as_string(hide_password=False))
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0005")
        assert not tables & set(inspect(db.engine).get_table_names())
        assert "auto_revalidate" not in {c["name"] for c in inspect(db.engine).get_columns("pools")}
        upgrade(db.engine)
        assert tables <= set(inspect(db.engine).get_table_names())
    finally:
        db.dispose()


@pytest.fixture
def expiring_api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    yield from make_api(database_url, data_dir=tmp_path, lease_s=0.6, reaper_interval_s=0.2)


def test_an_abandoned_validation_job_goes_back_to_the_queue(expiring_api: Api) -> None:
    api = expiring_api
    study, worker = completed_study(api)
    member = api.token(role="member")
    candidate = promote(api, member, study["id"], [good_trials(api, study["id"])[0]["number"]]).json()["candidates"][0]
    first = api.lease(worker)
    assert first is not None and first["validation"]["attempt"] == 1
    deadline = time.monotonic() + 10
    while (again := api.lease(worker)) is None:  # the reaper hands the job back once its lease expires
        assert time.monotonic() < deadline, "the expired validation lease was not handed back"
        time.sleep(0.2)
    assert again["validation"]["job_id"] == first["validation"]["job_id"] and again["validation"]["attempt"] == 2
    late = api.client.post(f"/v1/leases/{first['token']}/validation", headers=worker[0],
                           json=report(first["validation"], {candidate["id"]: 0.8}))
    assert late.status_code == 409 and late.json()["error"]["field"] == "token"
    body = report(again["validation"], {candidate["id"]: 0.8})
    assert api.client.post(f"/v1/leases/{again['token']}/validation", json=body, headers=worker[0]).status_code == 200
    assert api.client.get(f"/v1/candidates/{candidate['id']}", headers=api.admin).json()["state"] == "validated"


def test_a_report_that_does_not_fit_its_job_is_refused_naming_the_field(api: Api) -> None:
    study, worker = completed_study(api)
    numbers = [t["number"] for t in good_trials(api, study["id"])[:2]]
    candidates = promote(api, api.token(role="member"), study["id"], numbers).json()["candidates"]
    held = api.lease(worker)
    assert held is not None
    spec, url = held["validation"], f"/v1/leases/{held['token']}/validation"
    body = report(spec, {c["id"]: 0.8 for c in candidates})
    missing = {**body, "candidates": body["candidates"][:1]}
    r = api.client.post(url, json=missing, headers=worker[0])
    assert r.status_code == 422 and r.json()["error"]["field"] == "candidates"
    values = {k: v[:-1] for k, v in body["baseline"]["values"].items()}  # a round short
    short = {**body, "baseline": {**body["baseline"], "values": values}}
    r = api.client.post(url, json=short, headers=worker[0])
    assert r.status_code == 422 and r.json()["error"]["field"] == "values.f1"
    negative = {**body, "baseline": {**body["baseline"], "values": {"f1": [-1.0] * spec["rounds"]}}}
    assert api.client.post(url, json=negative, headers=worker[0]).status_code == 422  # a time is never negative
    assert api.client.post(url, json=body, headers=worker[0]).status_code == 200  # the lease is still live
    assert {c["state"] for c in api.client.get(f"/v1/studies/{study['id']}/candidates", headers=api.admin).json()} \
        == {"validated"}
