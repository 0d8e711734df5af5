"""The restore drill of docs/operations.md: a database the service has used is dumped with
pg_dump, restored with pg_restore into a new database, and a control plane serving the
restored one gives back the same studies, trials, fronts and tokens, and carries on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_worker import register, run
from helpers import LiveService, create_postgres_database, drop_postgres_database, run_cli, start_service, wait_for
from sqlalchemy import func, select

from service.store.db import Database
from service.store.models import Trial


def _study(name: str, trials: int) -> dict[str, Any]:
    return {
        "name": name, "kernel": {"backend": "python", "source": "tests.fake:objective"},
        "space": [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5},
                  {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}],
        "objectives": ["f1", "f2"], "budget": {"max_trials": trials}, "parallelism": 3,
        "sampler": {"name": "nsga2", "seed": 3, "options": {"population_size": 6}},
    }


def _worker_client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _snapshot(client: httpx.Client) -> dict[str, Any]:
    studies = client.get("/v1/studies").json()["items"]
    return {
        "studies": studies,
        "trials": {s["id"]: client.get(f"/v1/studies/{s['id']}/trials", params={"limit": 1000}).json()["items"]
                   for s in studies},
        "fronts": {s["id"]: client.get(f"/v1/studies/{s['id']}/front").json() for s in studies},
        "tokens": client.get("/v1/tokens").json(),
    }


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: it comes with the PostgreSQL client (`apt-get install postgresql-client`)"
    return path


@pytest.mark.postgres
def test_dump_restore_serve(live_service: LiveService, tmp_path: Path) -> None:
    admin = live_service.client()
    worker_token = live_service.make_worker_token()
    for name, trials in (("first", 14), ("second", 9)):
        assert admin.post("/v1/studies", json=_study(name, trials)).status_code == 201
    with _worker_client(live_service.url, worker_token) as worker:
        assert run(worker, register(worker), wait_s=5) == 23
    wait_for(lambda: [s["state"] for s in admin.get("/v1/studies").json()["items"]] == ["completed"] * 2, 30,
             "both studies to complete")
    before = _snapshot(admin)
    assert [s["state"] for s in before["studies"]] == ["completed", "completed"]
    assert all(front["trials"] for front in before["fronts"].values())
    live_service.stop()  # the drill dumps a quiet database: no trial is leased

    dump = tmp_path / "paretune.dump"
    dumped = subprocess.run([_tool("pg_dump"), "--format=custom", "--no-owner", f"--file={dump}", live_service.db_url],
                            capture_output=True, text=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr
    restored_url = create_postgres_database()
    try:
        restored = subprocess.run([_tool("pg_restore"), "--no-owner", "--exit-on-error", "-d", restored_url, str(dump)],
                                  capture_output=True, text=True, timeout=120)
        assert restored.returncode == 0, restored.stderr
        env = {"PARETUNE_DATABASE_URL": restored_url}
        current = run_cli("db", "current", env=env)
        assert current.returncode == 0 and ": current" in current.stdout, current.stdout + current.stderr

        workdir = tmp_path / "restored"
        workdir.mkdir()
        service = start_service(restored_url, workdir, {"PARETUNE_MIGRATE_ON_START": "false"})
        try:
            with service.client(live_service.admin_token) as client:  # the old admin token still works
                after = _snapshot(client)
                assert after["studies"] == before["studies"]
                assert after["trials"] == before["trials"]
                assert after["fronts"] == before["fronts"]
                assert after["tokens"][: len(before["tokens"])] == before["tokens"]
                # and it carries on: new studies and trials continue the restored sequences
                third = client.post("/v1/studies", json=_study("third", 4)).json()
                with _worker_client(service.url, worker_token) as w:
                    assert run(w, register(w), wait_s=5) == 4
                trials = client.get(f"/v1/studies/{third['id']}/trials").json()["items"]
            old_ids = {t["id"] for items in before["trials"].values() for t in items}
            assert third["id"] == 3 and min(t["id"] for t in trials) > max(old_ids)
            assert all(t["state"] == "completed" for t in trials)
            db = Database(restored_url)  # the change sequence that orders event streams went on too
            with db.read() as session:
                old_seq, new_seq = session.execute(select(
                    func.max(Trial.seq).filter(Trial.study_id < 3), func.min(Trial.seq).filter(Trial.study_id == 3),
                )).one()
            db.dispose()
            assert new_seq > old_seq > 0
        finally:
            service.stop()
    finally:
        drop_postgres_database(restored_url)
