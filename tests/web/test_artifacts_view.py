"""The artifact workflow in the dashboard: a member promotes a trial as a candidate, its
validation's rounds and then its intervals are shown, an approver approves it, and the
artifacts page lists the kernel, its target, the current version, the stale mark and the audit
log; an artifact's page follows a re-validation round by round to its verdict."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from artifact_reports import TARGET, fingerprint, report
from gemm_worker import GemmWorker, study_document
from helpers import LiveService, start_service
from pages import sign_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, dict[str, str], int, GemmWorker]]:
    workdir = tmp_path_factory.mktemp("artifacts")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    worker = None
    try:
        tokens = {role: service.make_user_token(role) for role in ("member", "approver")}
        worker = GemmWorker(service.url, service.make_worker_token("default"))
        with service.client(tokens["member"]) as api:
            r = api.post("/v1/studies", json=study_document("gemm-bf16-4096", 12, seed=3, parallelism=2))
            assert r.status_code == 201, r.text
            study_id = int(r.json()["id"])
            for _ in range(100):
                worker.run()
                if api.get(f"/v1/studies/{study_id}").json()["state"] == "completed":
                    break
        yield service, tokens, study_id, worker
    finally:
        if worker is not None:
            worker.close()
        service.stop()


def sign_out_and_in(page: Any, url: str, token: str) -> None:
    page.click("#sign-out")
    page.wait_for_url("**/ui/login**")
    page.fill("#token", token)
    page.press("#token", "Enter")
    page.wait_for_selector("#studies tbody tr")


def test_promote_validate_approve_and_the_artifacts_page(page: Any, finished: Any) -> None:
    service, tokens, study_id, worker = finished
    with service.client(tokens["member"]) as api:
        trials = api.get(f"/v1/studies/{study_id}/trials", params={"state": "completed"}).json()["items"]
    number = next(t["number"] for t in trials if not t["is_baseline"] and t["feasible"])

    sign_in(page, service.url, tokens["member"])
    page.goto(f"{service.url}/ui/studies/{study_id}/trials/{number}")
    page.wait_for_selector("#artifact-panel #promote")
    page.fill("#candidate-note", "best energy at equal runtime")
    page.fill("#candidate-rounds", "6")
    page.click("#promote")
    page.wait_for_selector("#artifact-panel .candidate[data-state=validating] "
                           ".rounds-progress[data-done='0'][data-left='6']")
    assert page.locator("#promote").count() == 0  # promoted once

    lease = worker.lease()  # the validation job, through the lease queue
    assert lease is not None and lease["validation"]["rounds"] == 6
    candidate_id = lease["validation"]["candidates"][0]["candidate_id"]
    body = report(lease["validation"], {candidate_id: 0.8})
    assert worker.client.post(f"/v1/leases/{lease['token']}/validation", json=body).status_code == 200

    page.wait_for_selector("#artifact-panel .candidate[data-state=validated] #validation-result")
    rows = page.locator("#validation-result tbody tr")
    assert rows.count() == 3  # one per objective of the study
    first = rows.first
    assert first.get_attribute("data-verdict") == "better"
    interval = first.locator("td").nth(1).text_content()
    low, high = (float(x) for x in interval.split("–")[:2] if x.strip())
    assert low < 0.8 < high < 1
    assert page.locator(f"#approve-{candidate_id}").count() == 0  # a member cannot approve

    sign_out_and_in(page, service.url, tokens["approver"])
    page.goto(f"{service.url}/ui/studies/{study_id}/trials/{number}")
    page.fill(f"#why-{candidate_id}", "20% faster, validated")
    page.click(f"#approve-{candidate_id}")
    page.wait_for_selector("#artifact-panel .candidate[data-state=approved] .artifact-link")
    page.click("#artifact-panel .artifact-link")
    page.wait_for_selector("#artifact .version-row[data-version='1'][data-state=current]")

    # a worker with another compiler: the artifact is stale, still current
    with service.client(service.make_worker_token()) as newcomer:
        assert newcomer.post("/v1/workers/register", json={
            "name": "upgraded", "pool": "default", "fingerprint": fingerprint("gcc 13.1.0")}).status_code == 201
    page.click("#nav-artifacts")
    page.wait_for_selector("#artifacts .artifact-row")
    kernel = page.locator("#artifacts .kernel-card")
    assert kernel.count() == 1 and "gemm-bf16-4096" in kernel.locator("h2").text_content()
    row = page.locator("#artifacts .artifact-row").first
    assert TARGET["cpu"] in row.text_content() and "v1 current" in row.text_content()
    assert row.locator(".stale-mark").count() == 1
    actions = page.locator("#audit-log tbody tr").evaluate_all("rows => rows.map(r => r.dataset.action)")
    assert actions == ["stale", "approve", "approve", "validated", "promote"]



def report_jobs(worker: GemmWorker, candidate_id: int, held: dict[str, Any] | None = None) -> None:
    """Report `held` and every other queued validation job (the rounds are split over the
    pool's live workers), the candidate at 0.8 of the baseline."""
    while held is not None:
        body = report(held["validation"], {candidate_id: 0.8})
        assert worker.client.post(f"/v1/leases/{held['token']}/validation", json=body).status_code == 200
        held = worker.lease()


def approved_artifact(service: LiveService, tokens: dict[str, str], study_id: int, worker: GemmWorker) -> int:
    """Another trial promoted, validated and approved through the API: the artifact's id."""
    with service.client(tokens["member"]) as api:
        trials = api.get(f"/v1/studies/{study_id}/trials", params={"state": "completed"}).json()["items"]
        promoted = {c["trial_number"] for c in api.get(f"/v1/studies/{study_id}/candidates").json()}
        number = next(t["number"] for t in trials if not t["is_baseline"] and t["feasible"]
                      and t["number"] not in promoted)
        candidate = api.post(f"/v1/studies/{study_id}/candidates", json={"trials": [number], "rounds": 4}).json()
    candidate_id = candidate["candidates"][0]["id"]
    report_jobs(worker, candidate_id, worker.lease())
    with service.client(tokens["approver"]) as api:
        version = api.post(f"/v1/candidates/{candidate_id}/approve", json={"why": "faster"})
        assert version.status_code == 201, version.text
        return int(version.json()["artifact_id"])


def test_the_artifact_page_follows_a_revalidation_round_by_round(page: Any, finished: Any) -> None:
    service, tokens, study_id, worker = finished
    artifact_id = approved_artifact(service, tokens, study_id, worker)
    sign_in(page, service.url, service.make_user_token("approver"))
    page.goto(f"{service.url}/ui/artifacts/{artifact_id}")
    page.wait_for_selector("#artifact #revalidate")
    assert page.locator("#revalidations").count() == 0  # none yet
    page.click("#revalidate")
    block = "#revalidations .candidate[data-state=validating]"
    page.wait_for_selector(f"{block} .rounds-progress[data-done='0'][data-left='20']")
    text = page.locator(f"{block} .rounds-progress").text_content()
    assert "0 / 20 rounds" in text and "ETA after the first round" in text, text

    held = worker.lease()  # the first job of the re-validation's 20 rounds
    assert held is not None
    beat = worker.client.post(f"/v1/leases/{held['token']}/heartbeat",
                              json={"phase": "round 3: baseline", "progress": {"round_s": [2.0, 4.0]}})
    assert beat.status_code == 200, beat.text
    beaten = time.time()
    page.wait_for_selector(f"{block} .rounds-progress[data-done='2'][data-left='18']")  # the page polls
    bar = page.locator(f"{block} .rounds-progress")
    text = bar.text_content()
    seen = time.time()
    assert "2 / 20 rounds" in text and "18 left" in text and "3.00 s a round" in text, text
    assert bar.locator(".seg-completed").evaluate("e => e.style.width") == "10%"

    # the ETA by hand: the running job's rounds left at the mean of 2 s and 4 s from when they were
    # reported, each queued job's at that pace from the moment the page read it (between the two times)
    with service.client(tokens["member"]) as api:
        candidate_id = api.get(f"/v1/artifacts/{artifact_id}").json()["revalidations"][0]["id"]
        jobs = api.get(f"/v1/candidates/{candidate_id}").json()["validation"]["jobs"]
    running = next(j for j in jobs if j["state"] == "running")
    end = datetime.fromisoformat(running["progress_at"].replace("Z", "+00:00")).timestamp() + \
        (running["rounds"] - 2) * 3.0
    queued = max((j["rounds"] * 3.0 for j in jobs if j["state"] == "queued"), default=0.0)
    eta = re.search(r"ETA ([0-9.]+) s", text)
    assert eta is not None, text
    assert max(end - seen, queued) - 0.05 <= float(eta.group(1)) <= max(end - beaten, queued) + 0.05, (eta, jobs)

    report_jobs(worker, candidate_id, held)
    page.wait_for_selector("#revalidations .candidate[data-state=validated] #validation-result")
    assert page.locator("#revalidations .rounds-progress").count() == 0  # judged: the verdict instead
