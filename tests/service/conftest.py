from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from service.accounts import tokens as auth
from service.app import create_app
from service.config import Settings
from service.scheduling.step import pending_studies
from service.store.db import Database
from service.store.migrate import upgrade

STUDY = {
    "name": "zdt",
    "kernel": {"backend": "python", "source": "tests.fake:objective"},
    "space": [
        {"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5},
        {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3},
    ],
    "objectives": [{"name": "f1", "direction": "minimize"}, {"name": "f2", "direction": "minimize"}],
    "budget": {"max_trials": 30},
    "parallelism": 4,
    "sampler": {"name": "nsga2", "seed": 7, "options": {"population_size": 8}},
}


def study_doc(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(STUDY)
    doc.update(changes)
    return doc


@dataclass
class Api:
    client: TestClient
    admin: dict[str, str]
    settings: Settings

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def token(self, kind: str = "user", role: str = "member", team: str | None = None, pool: str = "default") -> str:
        if team:
            self.client.post("/v1/teams", json={"name": team}, headers=self.admin)
        r = self.client.post("/v1/tokens", json={"name": "t", "kind": kind, "role": role, "team": team, "pool": pool},
                             headers=self.admin)
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def worker(self, backends: tuple[str, ...] = ("python",), pool: str = "default") -> tuple[dict[str, str], int]:
        """Headers of a registered worker, and its id."""
        headers = self.headers(self.token(kind="worker", pool=pool))
        r = self.client.post("/v1/workers/register", headers=headers,
                             json={"name": "w", "pool": pool, "fingerprint": {"backends": list(backends)}})
        assert r.status_code == 201, r.text
        return headers, int(r.json()["worker_id"])

    def lease(self, worker: tuple[dict[str, str], int]) -> dict[str, Any] | None:
        r = self.client.post("/v1/leases", json={"worker_id": worker[1], "wait_s": 0}, headers=worker[0])
        assert r.status_code in (200, 204), r.text
        return r.json() if r.status_code == 200 else None

    def post_result(self, worker: tuple[dict[str, str], int], token: str, body: dict[str, Any]) -> Any:
        return self.client.post(f"/v1/leases/{token}/result", json=body, headers=worker[0])

    def quiesce(self) -> None:
        """Run every study's scheduling step until none has anything left to do (the
        background scheduler does the same, a moment later)."""
        state = self.client.app.state.paretune  # type: ignore[attr-defined]
        while True:
            with state.db.read() as session:
                pending = pending_studies(session)
            reports = [state.scheduler.step_now(study_id, wait=True) for study_id in pending]
            if not any(r is not None and r.changed for r in reports):
                return

    def run_worker(self, worker: tuple[dict[str, str], int], results: Any, limit: int = 100_000,
                   next_lease: bool = False) -> int:
        """Lease and report until nothing is queued; `results(trial)` makes each result body.
        With `next_lease`, each result asks for the next lease, taken when one comes with it."""
        return self.run_workers([worker], results, limit=limit, next_lease=next_lease)

    def run_workers(self, workers: list[tuple[dict[str, str], int]], results: Any, *, limit: int = 100_000,
                    seed: int = 7, next_lease: bool = False) -> int:
        """Like run_worker, each lease taken by one of `workers` in a seeded random order."""
        order = random.Random(seed)
        done, held, worker = 0, None, workers[0]
        while done < limit:
            if held is None:  # else the worker goes on with the lease its last result brought
                worker = workers[order.randrange(len(workers))]
                held = self.lease(worker)
            if held is None:
                self.quiesce()
                held = self.lease(worker)
            if held is None:
                break
            body = {**results(held["trial"]), **({"next_lease": True} if next_lease else {})}
            r = self.post_result(worker, held["token"], body)
            assert r.status_code == 200, r.text
            held = r.json().get("next_lease")
            done += 1
        self.quiesce()
        return done

    def create_study(self, **changes: Any) -> dict[str, Any]:
        """A study, once its first step has queued its first trials."""
        r = self.client.post("/v1/studies", json=study_doc(**changes), headers=self.admin)
        assert r.status_code == 201, r.text
        self.quiesce()
        return self.client.get(f"/v1/studies/{r.json()['id']}", headers=self.admin).json()  # type: ignore[no-any-return]


@contextlib.contextmanager
def sent_statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """Each statement (and its parameters) the engine sends meanwhile."""
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", capture)


def make_api(database_url: str, **settings: Any) -> Iterator[Api]:
    config = Settings(database_url=database_url, **settings)
    db = Database(database_url)
    upgrade(db.engine)
    with db.write() as session:
        admin = auth.bootstrap_admin(session)
    db.dispose()
    with TestClient(create_app(config)) as client:
        yield Api(client, {"Authorization": f"Bearer {admin}"}, config)


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url)


@pytest.fixture
def sqlite_api(tmp_path: Path) -> Iterator[Api]:
    """The app on SQLite only, for what only SQLite does."""
    yield from make_api(f"sqlite:///{tmp_path / 'paretune.db'}")


@pytest.fixture
def postgres_api(postgres_database: str) -> Iterator[Api]:
    """The app on Postgres only, for what only Postgres does (rows held by other
    transactions, prepared statements' plans)."""
    yield from make_api(postgres_database)


@pytest.fixture
def fast_expiry_api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, lease_s=0.6, reaper_interval_s=0.2)


@pytest.fixture
def two_second_lease_api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, lease_s=2.0, reaper_interval_s=0.2)
