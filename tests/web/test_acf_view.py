"""ACF trials on the study and trial pages: labelled by the ACF's short hash, the baseline by
"none". A compile-only study over a Booster Pack, reported through the worker
protocol by a scripted worker (the real compile path is tests/service/test_acf_e2e.py's)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import LiveService, start_service
from pages import open_study, sign_in

from service.controls.packs import build

pytestmark = pytest.mark.browser
TOOLCHAIN = {"package": "nvidia-cuda-nvcc", "version": "13.3.73", "release": "13.3", "ptxas": "13.3.73"}
FILES = {f"f{i}.acf": f"controls file {i}".encode() for i in range(3)}


def metrics(config: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(repr(sorted(config.items())).encode()).digest()
    return {"registers": {"value": float(64 + digest[0] % 64), "unit": "regs"},
            "sass_bytes": {"value": float(4096 + digest[1] * 16), "unit": "B"}}


@pytest.fixture(scope="module")
def acf_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, str, int, int]]:
    workdir: Path = tmp_path_factory.mktemp("acf-view")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    try:
        member = service.make_user_token("member")
        worker = httpx.Client(base_url=service.url, timeout=30,
                              headers={"Authorization": f"Bearer {service.make_worker_token('default')}"})
        r = worker.post("/v1/workers/register", json={"name": "cpu-3", "pool": "default", "fingerprint": {
            "backends": ["triton"], "toolchain": TOOLCHAIN}})
        worker_id = r.json()["worker_id"]
        with service.client() as admin:
            assert admin.post("/v1/controls/packs", content=build("view-pack", FILES, compiler="ptxas",
                                                                  version="13.3")).status_code == 201
        with service.client(member) as api:
            study = api.post("/v1/studies", json={
                "name": "gemm ACFs", "kernel": {"backend": "triton", "builtin": "gemm_bf16"},
                "space": [{"name": "BLOCK_M", "type": "categorical", "choices": [64, 128]},
                          {"name": "acf", "type": "compiler_controls", "version": "13.3", "pack": "view-pack"}],
                "objectives": ["registers", "sass_bytes"], "target": {"compute_capability": "9.0"},
                "sampler": {"name": "grid", "seed": 1}, "parallelism": 2})
            assert study.status_code == 201, study.text
            study_id = study.json()["id"]
            while True:
                lease = worker.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 2})
                if lease.status_code == 204:
                    if api.get(f"/v1/studies/{study_id}").json()["state"] != "running":
                        break
                    continue
                held = lease.json()
                worker.post(f"/v1/leases/{held['token']}/result", json={
                    "status": "completed", "metrics": metrics(held["trial"]["config"])})
            trials = api.get(f"/v1/studies/{study_id}/trials").json()["items"]
            with_acf = next(t for t in trials if t["config"]["acf"] != "none")
        worker.close()
        yield service, member, study_id, with_acf["number"]
    finally:
        service.stop()


def test_acf_trials_are_labelled_by_their_short_hash(page: Any, acf_study: tuple[LiveService, str, int, int]) -> None:
    service, member, study_id, number = acf_study
    with service.client(member) as api:
        trials = api.get(f"/v1/studies/{study_id}/trials").json()["items"]
    sign_in(page, service.url, member)
    open_study(page, service.url, study_id)
    table = page.text_content("#trials")
    shas = {t["config"]["acf"] for t in trials} - {"none"}
    assert shas and all(f"acf {sha[:12]}" in table for sha in shas)
    assert not any(sha in table for sha in shas)  # never the whole hash
    baseline = page.locator("#front-table tbody tr.is-baseline").text_content()
    assert "none" in baseline

    page.goto(f"{service.url}/ui/studies/{study_id}/trials/{number}")
    page.wait_for_selector("#configuration .acf")
    chosen = next(t for t in trials if t["number"] == number)["config"]["acf"]
    label = page.locator("#configuration .acf")
    assert label.text_content() == f"acf {chosen[:12]}" and chosen in label.get_attribute("title")
