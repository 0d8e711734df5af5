"""The artifact workflow in the dashboard: a member promotes a trial as a candidate, its
validation's intervals are shown, an approver approves it, and the artifacts page lists the
kernel, its target, the current version, the stale mark and the audit log."""

from __future__ import annotations

from collections.abc import Iterator
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
    page.wait_for_selector("#artifact-panel .candidate[data-state=validating]")
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
