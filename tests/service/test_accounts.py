"""Tokens expire and rotate; who manages which token; failed authentications are limited
per client and logged without the secret; workers are listed per team's pools."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import Api, make_api, study_doc
from helpers import run_cli

from service.accounts import tokens
from service.accounts.limits import FailureLimiter
from service.store.db import Database
from service.store.models import ApiToken, as_utc


def create(api: Api, headers: dict[str, str], **body: object) -> dict[str, object]:
    r = api.client.post("/v1/tokens", json={"name": "t", **body}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def me(api: Api, secret: object) -> tuple[int, dict[str, object]]:
    r = api.client.get("/v1/me", headers=api.headers(str(secret)))
    return r.status_code, r.json()


def test_a_token_expires_and_says_so(api: Api) -> None:
    created = create(api, api.admin, role="viewer", expires_in=1)
    expires = datetime.fromisoformat(str(created["expires_at"]))
    assert abs((expires - datetime.fromisoformat(str(created["created_at"]))).total_seconds() - 1) < 0.01
    status, body = me(api, created["token"])  # cached from here on (the cache lives 5 s)
    assert status == 200 and body["expires_at"] is not None
    time.sleep(1.1)
    status, body = me(api, created["token"])
    assert status == 401, body
    error = body["error"]
    assert error["reason"] == "expired" and "expired at" in error["message"] and error["field"] == "authorization"


def test_cli_creates_an_expiring_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    out = run_cli("token", "create", "--name", "ci", "--role", "viewer", "--expires-in", "3600",
                  env={"PARETUNE_DATABASE_URL": url})
    assert out.returncode == 0, out.stderr
    secret = out.stdout.strip()
    db = Database(url)
    with db.read() as session:
        row = session.query(ApiToken).one()
        assert row.role == "viewer" and row.expires_at is not None
        lifetime = as_utc(row.expires_at) - as_utc(row.created_at)
        assert lifetime == timedelta(seconds=3600)
        assert tokens.authenticate(session, f"Bearer {secret}").valid_until == as_utc(row.expires_at)
    db.dispose()
    refused = run_cli("token", "create", "--expires-in", "0", env={"PARETUNE_DATABASE_URL": url})
    assert refused.returncode != 0 and "expires-in" in refused.stderr


def test_rotation_replaces_the_secret_and_revokes_the_old_one_at_once(api: Api) -> None:
    old = create(api, api.admin, name="ci-bot", role="member", expires_in=3600)
    assert me(api, old["token"])[0] == 200  # cached on this replica
    r = api.client.post(f"/v1/tokens/{old['id']}/rotate", headers=api.admin)
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["token"] != old["token"] and new["id"] != old["id"]
    assert (new["name"], new["role"], new["team"], new["kind"]) == ("ci-bot", "member", "default", "user")
    lifetime = datetime.fromisoformat(new["expires_at"]) - datetime.fromisoformat(new["created_at"])
    assert abs(lifetime.total_seconds() - 3600) < 1  # the old token's lifetime, from now
    status, body = me(api, old["token"])
    assert status == 401 and body["error"]["reason"] == "rotated"
    assert me(api, new["token"])[0] == 200
    again = api.client.post(f"/v1/tokens/{old['id']}/rotate", headers=api.admin)
    assert again.status_code == 404  # a revoked token is gone
    listed = {t["id"] for t in api.client.get("/v1/tokens", headers=api.admin).json()}
    assert new["id"] in listed and old["id"] not in listed


def test_rotation_with_a_grace_period(api: Api) -> None:
    old = create(api, api.admin, role="viewer")
    r = api.client.post(f"/v1/tokens/{old['id']}/rotate", json={"grace_s": 1, "expires_in": 600}, headers=api.admin)
    new = r.json()
    assert r.status_code == 201 and new["expires_at"] is not None
    status, body = me(api, old["token"])
    assert status == 200 and body["expires_at"] is not None  # works until the grace period ends
    listed = {t["id"]: t for t in api.client.get("/v1/tokens", headers=api.admin).json()}
    assert listed[int(str(old["id"]))]["replaced_by"] == new["id"] and listed[int(str(old["id"]))]["revoked_at"]
    twice = api.client.post(f"/v1/tokens/{old['id']}/rotate", headers=api.admin)
    assert twice.status_code == 409 and str(new["id"]) in twice.json()["error"]["message"]
    time.sleep(1.1)
    status, body = me(api, old["token"])
    assert status == 401 and body["error"]["reason"] == "rotated"
    assert me(api, new["token"])[0] == 200


def test_who_manages_which_token(api: Api) -> None:
    team_admin = api.headers(api.token(role="admin"))  # an admin of team default, not the operator
    member = create(api, api.admin, role="member")
    other_member = create(api, api.admin, role="member")
    other_team_admin = api.headers(api.token(role="admin", team="other"))
    operator_id = api.client.get("/v1/tokens", headers=api.admin).json()[0]["id"]

    # the operator's token is invisible to a team admin: not listed, not revocable, not rotatable
    assert operator_id not in {t["id"] for t in api.client.get("/v1/tokens", headers=team_admin).json()}
    for method, path in (("DELETE", f"/v1/tokens/{operator_id}"), ("POST", f"/v1/tokens/{operator_id}/rotate")):
        r = api.client.request(method, path, headers=team_admin)
        assert r.status_code == 404, r.text
    assert me(api, api.admin["Authorization"][7:])[0] == 200
    r = api.client.post("/v1/tokens", json={"name": "x", "superuser": True}, headers=team_admin)
    assert r.status_code == 403 and r.json()["error"]["field"] == "superuser"
    superuser = create(api, api.admin, role="admin", superuser=True)
    assert superuser["superuser"] is True

    # another team's admin sees none of team default's tokens
    assert api.client.delete(f"/v1/tokens/{member['id']}", headers=other_team_admin).status_code == 404
    assert api.client.post(f"/v1/tokens/{member['id']}/rotate", headers=other_team_admin).status_code == 404
    assert all(t["team"] == "other" for t in api.client.get("/v1/tokens", headers=other_team_admin).json())

    # a member rotates its own token but no one else's
    mine = api.headers(str(member["token"]))
    r = api.client.post(f"/v1/tokens/{other_member['id']}/rotate", headers=mine)
    assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
    r = api.client.post(f"/v1/tokens/{member['id']}/rotate", headers=mine)
    assert r.status_code == 201 and r.json()["role"] == "member"
    assert api.client.get("/v1/me", headers=mine).status_code == 401

    # the team admin manages its team's tokens, and revocation on this replica is immediate
    other = api.headers(str(other_member["token"]))
    assert api.client.get("/v1/me", headers=other).status_code == 200
    assert api.client.delete(f"/v1/tokens/{other_member['id']}", headers=team_admin).status_code == 204
    r = api.client.get("/v1/me", headers=other)
    assert r.status_code == 401 and r.json()["error"]["reason"] == "revoked"

    # worker tokens are the operator's alone
    worker = create(api, api.admin, kind="worker", pool="gpu")
    assert api.client.delete(f"/v1/tokens/{worker['id']}", headers=team_admin).status_code == 404
    r = api.client.post("/v1/tokens", json={"name": "w", "kind": "worker"}, headers=team_admin)
    assert r.status_code == 403
    assert api.client.post(f"/v1/tokens/{worker['id']}/rotate", headers=api.admin).json()["pool"] == "gpu"


@pytest.fixture
def limited_api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, auth_failure_limit=20, auth_failure_window_s=1.5)


def test_failed_authentications_are_limited_and_logged(limited_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    api = limited_api
    good = create(api, api.admin, role="viewer")
    caplog.set_level(logging.WARNING, logger="paretune.auth")
    wrong = "ptu_" + "x" * 43
    started = time.monotonic()
    for _ in range(20):
        assert api.client.get("/v1/me", headers=api.headers(wrong)).status_code == 401
    r = api.client.get("/v1/me", headers=api.headers(wrong))
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == "too_many_requests" and error["field"] == "authorization"
    assert 1 <= int(r.headers["Retry-After"]) == error["retry_after_s"] <= 2
    # while limited, even a good token is refused: guessing learns nothing
    assert api.client.get("/v1/me", headers=api.headers(str(good["token"]))).status_code == 429
    # no token at all is not a guess and is not counted, but is still a 401
    assert api.client.get("/v1/me").status_code == 401
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "paretune.auth"]
    assert len(logged) == 20 and all("ptu_xxxxxx" in m and "unknown" in m for m in logged)
    assert not any(wrong in m for m in logged)
    time.sleep(max(0.0, started + 1.6 - time.monotonic()))
    assert api.client.get("/v1/me", headers=api.headers(str(good["token"]))).status_code == 200


def test_failure_limiter_window() -> None:
    limiter = FailureLimiter(limit=3, window_s=60)
    for t in (0.0, 10.0, 20.0):
        assert limiter.retry_after("a", t) is None
        limiter.record("a", t)
    assert limiter.retry_after("a", 30.0) == pytest.approx(30.0)  # until the failure at 0 leaves
    assert limiter.retry_after("b", 30.0) is None  # per client
    assert limiter.retry_after("a", 60.0) is None
    limiter.record("a", 61.0)
    assert limiter.retry_after("a", 61.0) == pytest.approx(9.0)  # failures at 10, 20, 61
    small = FailureLimiter(limit=1, window_s=60, max_clients=2)
    for client in ("x", "y", "z"):
        small.record(client, 0.0)
    assert small.retry_after("x", 1.0) is None and small.retry_after("z", 1.0) is not None


def test_workers_are_listed_per_team_pools(api: Api) -> None:
    api.worker(pool="alpha")
    api.worker(pool="beta")
    api.create_study(pool="alpha")
    other = api.headers(api.token(role="viewer", team="other"))
    assert api.client.post("/v1/studies", json=study_doc(pool="beta"),
                           headers=api.headers(api.token(role="member", team="other"))).status_code == 201
    idle = api.headers(api.token(role="viewer", team="idle"))
    default_viewer = api.headers(api.token(role="viewer"))
    pools = {name: sorted(w["pool"] for w in api.client.get("/v1/workers", headers=h).json())
             for name, h in (("default", default_viewer), ("other", other), ("idle", idle), ("operator", api.admin))}
    assert pools == {"default": ["alpha"], "other": ["beta"], "idle": [], "operator": ["alpha", "beta"]}
