"""What the service refuses from workers: results that are not numbers or are negative
amounts, failure reasons only the service sets, and workers below their pool's required
isolation level (at registration, and at lease time once the requirement is raised).
The real app in process, on SQLite and on Postgres."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.accounts import tokens as auth
from service.app import create_app
from service.config import Settings
from service.store.db import Database
from service.store.migrate import upgrade

STUDY = {
    "name": "guards",
    "kernel": {"backend": "python", "source": "tests.fake:objective"},
    "space": [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5}],
    "objectives": ["runtime_ms", "f1"],
    "budget": {"max_trials": 5},
    "parallelism": 1,
    "sampler": {"name": "random", "seed": 1},
}


@pytest.fixture
def client(database_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    db = Database(database_url)
    upgrade(db.engine)
    with db.write() as session:
        admin = auth.bootstrap_admin(session)
    db.dispose()
    with TestClient(create_app(Settings(database_url=database_url))) as test_client:
        yield test_client, {"Authorization": f"Bearer {admin}"}


def _token(client: TestClient, admin: dict[str, str], **body: Any) -> dict[str, str]:
    response = client.post("/v1/tokens", json={"name": "t", **body}, headers=admin)
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _register(client: TestClient, headers: dict[str, str], isolation: str | None, pool: str = "default") -> Any:
    fingerprint: dict[str, Any] = {"backends": ["python"]}
    if isolation is not None:
        fingerprint["isolation"] = isolation
    return client.post("/v1/workers/register", headers=headers, json={"name": "w", "pool": pool,
                                                                      "fingerprint": fingerprint})


def _leased(client: TestClient, admin: dict[str, str]) -> tuple[dict[str, str], str]:
    assert client.post("/v1/studies", json=STUDY, headers=admin).status_code == 201
    worker = _token(client, admin, kind="worker")
    worker_id = _register(client, worker, "namespaces").json()["worker_id"]
    # long-poll: the background scheduler queues the study's first trials a moment later
    lease = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 20}, headers=worker)
    assert lease.status_code == 200, lease.text
    return worker, lease.json()["token"]


@pytest.mark.parametrize(
    ("metrics", "field", "says"),
    [
        ({"runtime_ms": {"value": math.nan}, "f1": {"value": 1}}, "metrics.runtime_ms.value", "finite"),
        ({"runtime_ms": {"value": 1.0, "stats": {"p99": math.inf}}, "f1": {"value": 1}}, "metrics.runtime_ms.stats",
         "finite"),
        ({"runtime_ms": {"value": -0.5}, "f1": {"value": 1}}, "metrics", "cannot be negative"),
        ({"runtime_ms": {"value": 1.0, "ci_low": -1.0}, "f1": {"value": 1}}, "metrics", "cannot be negative"),
        ({"runtime_ms": {"value": 1.0}, "f1": {"value": 1}, "energy_mj": {"value": -3.0}}, "metrics",
         "energy_mj"),
    ],
)
def test_results_that_are_not_measurements_are_refused(client, metrics, field, says):
    test_client, admin = client
    worker, lease = _leased(test_client, admin)

    body = json.dumps({"status": "completed", "metrics": metrics})  # NaN and Infinity, as Python writes them
    response = test_client.post(f"/v1/leases/{lease}/result", content=body,
                                headers={**worker, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"].startswith(field) and says in error["message"], error
    # a negative value of a metric that is not an amount is fine (a python objective's own)
    fine = test_client.post(f"/v1/leases/{lease}/result", headers=worker,
                            json={"status": "completed", "metrics": {"runtime_ms": {"value": 1.0},
                                                                     "f1": {"value": -2.0}}})
    assert fine.status_code == 200, fine.text


@pytest.mark.parametrize("reason", ["lease expired", "cancelled"])
def test_a_worker_cannot_report_the_services_failure_reasons(client, reason):
    test_client, admin = client
    worker, lease = _leased(test_client, admin)
    response = test_client.post(f"/v1/leases/{lease}/result", headers=worker,
                                json={"status": "failed", "failure_reason": reason, "message": "x"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "failure_reason" and "set by the service only" in error["message"]
    assert test_client.post(f"/v1/leases/{lease}/result", headers=worker,
                            json={"status": "failed", "failure_reason": "crash"}).status_code == 200


def test_a_pool_requires_an_isolation_level(client):
    test_client, admin = client
    member = _token(test_client, admin, role="member")
    team_admin = _token(test_client, admin, role="admin")
    for who in (member, team_admin):  # only the operator sets requirements
        refused = test_client.put("/v1/pools/gpu", json={"min_isolation": "user"}, headers=who)
        assert refused.status_code == 403 and "operator" in refused.json()["error"]["message"]
    bad = test_client.put("/v1/pools/gpu", json={"min_isolation": "total"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "min_isolation"
    put = test_client.put("/v1/pools/gpu", json={"min_isolation": "namespaces"}, headers=admin)
    assert put.status_code == 200 and put.json()["min_isolation"] == "namespaces"

    worker = _token(test_client, admin, kind="worker", pool="gpu")
    listed = test_client.get("/v1/pools", headers=worker)  # readable by every token, workers too
    assert listed.status_code == 200 and [(p["name"], p["min_isolation"]) for p in listed.json()] == [
        ("gpu", "namespaces")]
    assert test_client.get("/v1/pools", headers=member).json() == listed.json()

    for level in ("none", "user", None):  # None: a worker that does not say, counted as none
        refused = _register(test_client, worker, level, pool="gpu")
        assert refused.status_code == 403, refused.text
        message = refused.json()["error"]["message"]
        assert "'gpu'" in message and "'namespaces'" in message and f"'{level or 'none'}'" in message
    registered = _register(test_client, worker, "namespaces", pool="gpu")
    assert registered.status_code == 201
    other = _token(test_client, admin, kind="worker")  # the default pool requires nothing
    assert _register(test_client, other, "none").status_code == 201

    # a requirement raised after registration refuses the worker's next lease request
    weak_token = _token(test_client, admin, kind="worker", pool="cpu")
    weak = _register(test_client, weak_token, "user", pool="cpu").json()["worker_id"]
    lease = test_client.post("/v1/leases", json={"worker_id": weak, "wait_s": 0}, headers=weak_token)
    assert lease.status_code == 204
    assert test_client.put("/v1/pools/cpu", json={"min_isolation": "namespaces"}, headers=admin).status_code == 200
    lease = test_client.post("/v1/leases", json={"worker_id": weak, "wait_s": 0}, headers=weak_token)
    assert lease.status_code == 403
    assert "'cpu' requires trial isolation 'namespaces'" in lease.json()["error"]["message"]
    assert test_client.put("/v1/pools/cpu", json={"min_isolation": "user"}, headers=admin).status_code == 200
    lease = test_client.post("/v1/leases", json={"worker_id": weak, "wait_s": 0}, headers=weak_token)
    assert lease.status_code == 204


def test_a_studys_sandbox_limits_reach_the_worker_and_are_checked(client):
    test_client, admin = client
    bad = test_client.post("/v1/studies", headers=admin,
                           json={**STUDY, "limits": {"sandbox": {"memory_mb": 10}}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "limits.sandbox.memory_mb"
    unknown = test_client.post("/v1/studies", headers=admin, json={**STUDY, "limits": {"sandbox": {"gpus": 2}}})
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "limits.sandbox.gpus"
    sandbox = {"memory_mb": 2048, "processes": 64, "disk_mb": 100}
    assert test_client.post("/v1/studies", headers=admin,
                            json={**STUDY, "limits": {"sandbox": sandbox}}).status_code == 201
    worker = _token(test_client, admin, kind="worker")
    worker_id = _register(test_client, worker, "namespaces").json()["worker_id"]
    lease = test_client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 20}, headers=worker).json()
    assert lease["trial"]["sandbox"] == {**dict.fromkeys(("file_size_mb", "open_files", "cpu_s")), **sandbox}
