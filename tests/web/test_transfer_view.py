"""A study that started from related studies (warm_start: related) says so on its page: the
"Started from" card lists each configuration's study, trial and shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import LiveService, start_service
from pages import open_study, sign_in

pytestmark = pytest.mark.browser
SPACE = [{"name": "TILE_M", "type": "categorical", "choices": [4, 8, 16, 32], "default": 16}]


def document(n: int, sampler: str) -> dict[str, Any]:
    return {"name": f"matmul n={n}", "kernel": {"backend": "cpu", "builtin": "matmul",
                                                "workload": [{"dims": {"n": n}}]},
            "space": SPACE, "objectives": ["runtime_ms"], "sampler": {"name": sampler, "seed": 1},
            "budget": {"max_trials": 10}, "parallelism": 2}


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, str, int, int]]:
    workdir: Path = tmp_path_factory.mktemp("transfer-view")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    try:
        member = service.make_user_token("member")
        worker = httpx.Client(base_url=service.url, timeout=30,
                              headers={"Authorization": f"Bearer {service.make_worker_token('default')}"})
        worker_id = worker.post("/v1/workers/register", json={"name": "cpu", "pool": "default", "fingerprint": {
            "backends": ["cpu"], "cpu_model": "Test CPU"}}).json()["worker_id"]
        with service.client(member) as api:
            earlier = api.post("/v1/studies", json=document(64, "grid")).json()["id"]
            while True:
                lease = worker.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 2})
                if lease.status_code == 204:
                    if api.get(f"/v1/studies/{earlier}").json()["state"] != "running":
                        break
                    continue
                held = lease.json()
                runtime = abs(held["trial"]["config"]["TILE_M"] - 8) + 1.0  # 8 best, then 4 and 16
                worker.post(f"/v1/leases/{held['token']}/result", json={
                    "status": "completed", "metrics": {"runtime_ms": {"value": runtime}}})
            later = api.post("/v1/studies", json=document(128, "random"))
            assert later.status_code == 201, later.text
        worker.close()
        yield service, member, earlier, later.json()["id"]
    finally:
        service.stop()


def test_the_study_page_says_what_it_started_from(page: Any, studies: tuple[LiveService, str, int, int]) -> None:
    service, member, earlier, later = studies
    sign_in(page, service.url, member)
    open_study(page, service.url, later)
    card = page.locator("#started-from")
    card.wait_for()
    text = card.text_content()
    assert "Started from (related)" in text
    items = card.locator("li")
    assert items.count() == 3  # TILE_M 8, 4, 32 (16 is the baseline)
    assert f"study #{earlier}" in items.nth(0).text_content() and "n=64" in items.nth(0).text_content()
    assert "Test CPU" in text and "distance 1" in text
    assert card.locator("a").first.get_attribute("href") == f"/ui/studies/{earlier}"

    open_study(page, service.url, earlier)  # a grid study starts from nothing: no card
    page.locator("#front").wait_for()
    assert page.locator("#started-from").count() == 0


def test_the_study_page_says_what_its_sampler_learns_from(page: Any, studies: tuple[LiveService, str, int, int]
                                                          ) -> None:
    """An `lfbo` study's classifier learns from the related study's trials: one line per study."""
    service, member, earlier, _ = studies
    with service.client(member) as api:
        created = api.post("/v1/studies", json={**document(256, "lfbo"), "name": "learns"})
        assert created.status_code == 201, created.text
        learned = created.json()["warm_start"]["learned_from"]
        completed = api.get(f"/v1/studies/{earlier}").json()["progress"]["completed"]
    assert [(s["study"], s["trials"]) for s in learned] == [(earlier, completed)]
    sign_in(page, service.url, member)
    open_study(page, service.url, created.json()["id"])
    card = page.locator("#started-from")
    card.wait_for()
    line = card.locator("li").last.text_content()
    assert f"learns from study #{earlier}: {completed} trials, n=64" in line and "distance 2" in line, line


def test_the_study_page_shows_its_workload_as_a_histogram(page: Any, studies: tuple[LiveService, str, int, int]
                                                          ) -> None:
    """A traffic import's buckets and weights: one bar per shape, its share of the total weight."""
    service, member, _, _ = studies
    buckets = [({"n": 32}, 6.0), ({"n": 64}, 3.0), ({"n": 128}, 1.0)]
    doc = {**document(32, "random"), "name": "weighted buckets"}
    doc["kernel"]["workload"] = [{"dims": dims, "weight": weight} for dims, weight in buckets]
    with service.client(member) as api:
        created = api.post("/v1/studies", json=doc)
        assert created.status_code == 201, created.text
    sign_in(page, service.url, member)
    page.goto(f"{service.url}/ui/studies/{created.json()['id']}")
    card = page.locator("#workload")
    card.wait_for()
    assert "Workload (3 shapes)" in card.text_content()
    rows = card.locator("li")
    shown = [(rows.nth(i).locator(".shape").text_content(), float(rows.nth(i).get_attribute("data-share")),
              rows.nth(i).locator(".share").text_content()) for i in range(rows.count())]
    assert shown == [("n=32", 0.6, "60.0%"), ("n=64", 0.3, "30.0%"), ("n=128", 0.1, "10.0%")]
    widths = [rows.nth(i).locator(".bar span").evaluate("e => e.style.width") for i in range(3)]
    assert widths == ["100%", "50%", "16.6667%"]  # each weight against the largest
