"""Fixtures for the dashboard's browser tests: one service per module, populated through the
real worker protocol, and Debian's Chromium driven by Playwright (no browser download)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from gemm_worker import GemmWorker, study_document
from helpers import start_service
from pages import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, Dashboard


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is required in CI: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    workdir = tmp_path_factory.mktemp("dashboard")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    workers: list[GemmWorker] = []
    try:
        member = service.make_user_token("member")
        viewer = service.make_user_token("viewer")
        worker = GemmWorker(service.url, service.make_worker_token("default"))
        batch = GemmWorker(service.url, service.make_worker_token("batch"), pool="batch", name="gpu-node-11")
        workers += [worker, batch]
        with service.client(member) as api:
            finished = _create(api, study_document("gemm-bf16-4096", 60, seed=3))
            worker.run(fail_every=13)
            live = _create(api, study_document("gemm-bf16-2048", 30, seed=5))
            worker.run(limit=29)
            running = _create(api, {**study_document("gemm-fp8-8192", 40, seed=9), "pool": "batch"})
            batch.run(limit=12)
        yield Dashboard(service, member, viewer, worker, batch, finished, live, running)
    finally:
        for w in workers:
            w.close()
        service.stop()


def _create(api: object, document: dict[str, object]) -> int:
    r = api.post("/v1/studies", json=document)  # type: ignore[attr-defined]
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    """A fresh browser context (empty localStorage); fails the test on any uncaught script error."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[attr-defined]
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"script errors in the page: {errors}"
