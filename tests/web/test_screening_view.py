"""The dashboard on a study that screens: screened-out trials listed apart, their screening
values marked as such in the trials table, and the trial page saying what became of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gemm_worker import GemmWorker, study_document
from helpers import LiveService, start_service
from pages import open_study, sign_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, str, int]]:
    workdir = tmp_path_factory.mktemp("screening")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    worker = None
    try:
        member = service.make_user_token("member")
        worker = GemmWorker(service.url, service.make_worker_token("default"))
        document = {**study_document("gemm screened", 30, seed=4, parallelism=2),
                    "measure": {"screen": {}, "promote": {"energy_runtime_ratio": 1.2, "margins": {"compile_s": 0.1}}}}
        with service.client(member) as api:
            r = api.post("/v1/studies", json=document)
            assert r.status_code == 201, r.text
            study_id = int(r.json()["id"])
            for _ in range(200):  # the worker drains the queue; the service's step refills it
                worker.run()
                if api.get(f"/v1/studies/{study_id}").json()["state"] == "completed":
                    break
        yield service, member, study_id
    finally:
        if worker is not None:
            worker.close()
        service.stop()


def test_screened_out_trials_are_shown_as_such(page: Any, screened: tuple[LiveService, str, int]) -> None:
    service, member, study_id = screened
    with service.client(member) as api:
        study = api.get(f"/v1/studies/{study_id}").json()
        out = api.get(f"/v1/studies/{study_id}/trials", params={"state": "screened_out", "limit": 1000}).json()["items"]
    assert study["state"] == "completed" and out, study["progress"]
    sign_in(page, service.url, member)
    open_study(page, service.url, study_id)
    assert "30" in page.text_content(".progress-label")  # screened-out trials count as done

    page.click(".seg-btn[data-filter=screened_out]")
    page.wait_for_function(
        "n => document.querySelectorAll('#trials tbody tr[data-state=screened_out]').length === n", arg=len(out))
    rows = page.locator("#trials tbody tr")
    assert rows.count() == len(out)
    first = rows.first
    assert first.locator(".badge").text_content() == "screened_out"
    # runtime was screened: shown as a screening value; energy was not measured at all
    runtime = first.locator("td").nth(2)
    assert runtime.locator(".screened-value").count() == 1 and runtime.text_content().startswith("≈")
    assert first.locator("td").nth(3).text_content() == "–"

    number = int(first.get_attribute("data-number"))
    trial = next(t for t in out if t["number"] == number)
    page.goto(f"{service.url}/ui/studies/{study_id}/trials/{number}")
    page.wait_for_selector("#screened-note")
    assert f"by trial #{trial['screening']['dominated_by']}" in page.text_content("#screened-note")
    screening = page.text_content("#screening")
    assert f"screened out by trial #{trial['screening']['dominated_by']}" in screening
    assert "sampler heard" in screening
    assert page.locator("#screening tr[data-metric=runtime_ms]").count() == 1
