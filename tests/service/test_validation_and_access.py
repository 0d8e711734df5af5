"""Bad input gets a 4xx that names the field; teams never see each other; roles hold."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Api, study_doc

X = {"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5}
Y = {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}

BAD_DOCUMENTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown objective", {"objectives": ["speed"], "kernel": {"backend": "cpu", "source": "int f;"}},
     "objectives.0.name", "unknown objective 'speed'"),
    ("low above high", {"space": [{**X, "low": 2.0}, Y]}, "space.0.float", "must not be greater than high"),
    ("empty choices", {"space": [{"name": "c", "type": "categorical", "choices": []}]}, "space.0.categorical",
     "at least one value"),
    ("wrong type", {"parallelism": "many"}, "parallelism", "integer"),
    ("wrong type in space", {"space": [{**X, "low": "zero"}, Y]}, "space.0.float.low", "number"),
    ("unknown parameter type", {"space": [{"name": "z", "type": "complex"}]}, "space.0", "type"),
    ("duplicate parameter", {"space": [X, X]}, "space", "unique"),
    ("default outside range", {"space": [{**X, "default": 3.0}, Y]}, "space.0.float", "default"),
    ("baseline outside range", {"baseline": {"x": 0.5, "y": 99}}, "baseline.y", "not in [1, 10]"),
    ("baseline names unknown", {"baseline": {"q": 1}}, "baseline.q", "not a parameter"),
    ("no default and no baseline", {"space": [{"name": "x", "type": "float", "low": 0, "high": 1}]},
     "space.0.default", "has no default"),
    ("unknown backend", {"kernel": {"backend": "fortran", "source": "x"}}, "kernel.backend", "unknown backend"),
    ("both builtin and source", {"kernel": {"backend": "cpu", "builtin": "matmul", "source": "x"}}, "kernel",
     "exactly one"),
    ("unknown builtin", {"kernel": {"backend": "cpu", "builtin": "nope"}, "space": None, "objectives": ["runtime_ms"]},
     "kernel.builtin",
     "no built-in cpu kernel"),
    ("unknown sampler", {"sampler": {"name": "annealing"}}, "sampler.name", "unknown sampler"),
    ("unknown sampler option", {"sampler": {"name": "nsga2", "options": {"popsize": 3}}},
     "sampler.options.popsize", "population_size"),
    ("zero trials", {"budget": {"max_trials": 0}}, "budget.max_trials", "greater than or equal to 1"),
    ("log with non-positive low", {"space": [{**X, "log": True}, Y]}, "space.0.float", "> 0"),
    ("unknown field", {"colour": "red"}, "colour", "Extra inputs"),
    ("constraint on unknown metric", {"constraints": [{"metric": "bogus", "op": "<=", "value": 1}]},
     "constraints.0.metric", "unknown metric"),
    ("bad reference point", {"reference_point": {"f1": 0.5}}, "reference_point.f1", "> 1"),
    ("grid over a continuous float", {"sampler": {"name": "grid"}}, "sampler.name", "step"),
    ("objective listed twice", {"objectives": ["f1", "f1"]}, "objectives.1.name", "twice"),
]


@pytest.mark.parametrize("case", BAD_DOCUMENTS, ids=[c[0] for c in BAD_DOCUMENTS])
def test_bad_document_is_a_422_naming_the_field(api: Api, case: tuple[str, dict[str, Any], str, str]) -> None:
    _, changes, field, message = case
    doc = {k: v for k, v in study_doc(**changes).items() if v is not None}
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"].startswith(field), error
    assert message in error["message"], error


@pytest.mark.parametrize("body", ["[1, 2]", '"study"', "{not json"])
def test_non_object_bodies_are_refused(api: Api, body: str) -> None:
    r = api.client.post("/v1/studies", content=body, headers={**api.admin, "Content-Type": "application/json"})
    assert r.status_code == 422 and "error" in r.json()


def test_huge_document_is_a_413(api: Api) -> None:
    doc = study_doc(description="x" * 2_000_000)
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 413 and r.json()["error"]["field"] == "body"
    many = study_doc(space=[{"name": f"p{i}", "type": "bool", "default": True} for i in range(500)])
    r = api.client.post("/v1/studies", json=many, headers=api.admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "space"


def test_teams_never_see_each_others_studies(api: Api) -> None:
    study = api.create_study()
    other = api.headers(api.token(role="admin", team="other"))
    sid = study["id"]
    for path in (f"/v1/studies/{sid}", f"/v1/studies/{sid}/trials", f"/v1/studies/{sid}/front",
                 f"/v1/studies/{sid}/trials/0", f"/v1/studies/{sid}/events"):
        r = api.client.get(path, headers=other)
        assert r.status_code == 404, (path, r.text)
    for action in ("pause", "resume", "cancel"):
        assert api.client.post(f"/v1/studies/{sid}/{action}", headers=other).status_code == 404
    assert api.client.get("/v1/studies", headers=other).json()["items"] == []
    mine = api.client.get("/v1/studies", headers=api.admin).json()["items"]
    assert [s["id"] for s in mine] == [sid]


def test_roles(api: Api) -> None:
    study = api.create_study()
    viewer = api.headers(api.token(role="viewer"))
    member = api.headers(api.token(role="member"))
    worker = api.headers(api.token(kind="worker"))
    assert api.client.get(f"/v1/studies/{study['id']}", headers=viewer).status_code == 200
    r = api.client.post(f"/v1/studies/{study['id']}/cancel", headers=viewer)
    assert r.status_code == 403 and "member" in r.json()["error"]["message"]
    assert api.client.post("/v1/studies", json=study_doc(), headers=viewer).status_code == 403
    assert api.client.post("/v1/studies", json=study_doc(), headers=member).status_code == 201
    assert api.client.post("/v1/tokens", json={"name": "x"}, headers=member).status_code == 403
    assert api.client.get("/v1/studies", headers=worker).status_code == 403
    assert api.client.post("/v1/leases", json={"worker_id": 1}, headers=member).status_code == 403
    assert api.client.get("/v1/studies").status_code == 401
    assert api.client.get("/v1/studies", headers=api.headers("nope")).status_code == 401


def test_worker_cannot_use_another_tokens_worker_or_pool(api: Api) -> None:
    headers, worker_id = api.worker()
    other = api.headers(api.token(kind="worker"))
    r = api.client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 0}, headers=other)
    assert r.status_code == 404 and r.json()["error"]["field"] == "worker_id"
    pool_token = api.headers(api.token(kind="worker", pool="gpu"))
    r = api.client.post("/v1/workers/register", json={"name": "w", "pool": "cpu", "fingerprint": {}},
                        headers=pool_token)
    assert r.status_code == 403 and r.json()["error"]["field"] == "pool"


def test_revoked_token_is_refused(api: Api) -> None:
    created = api.client.post("/v1/tokens", json={"name": "tmp", "role": "viewer"}, headers=api.admin).json()
    assert api.client.get("/v1/me", headers=api.headers(created["token"])).json()["role"] == "viewer"
    assert api.client.delete(f"/v1/tokens/{created['id']}", headers=api.admin).status_code == 204
    assert api.client.get("/v1/me", headers=api.headers(created["token"])).status_code == 401


def test_no_bad_input_gives_a_5xx(api: Api) -> None:
    """A sweep of malformed requests over every endpoint: each is refused with a 4xx."""
    study = api.create_study()
    sid = study["id"]
    worker_headers, worker_id = api.worker()
    requests = [
        ("GET", f"/v1/studies/{sid}/trials?limit=0", api.admin, None),
        ("GET", f"/v1/studies/{sid}/trials?cursor=garbage", api.admin, None),
        ("GET", f"/v1/studies/{sid}/trials?sort=color", api.admin, None),
        ("GET", f"/v1/studies/{sid}/trials?state=done", api.admin, None),
        ("GET", "/v1/studies/abc", api.admin, None),
        ("GET", "/v1/studies/999999", api.admin, None),
        ("GET", "/v1/studies?state=weird", api.admin, None),
        ("POST", "/v1/leases", worker_headers, {"worker_id": "me"}),
        ("POST", "/v1/leases", worker_headers, {"worker_id": worker_id, "wait_s": 3600}),
        ("POST", "/v1/leases/x/result", worker_headers, {"status": "great"}),
        ("POST", "/v1/leases/x/result", worker_headers, {"status": "completed", "metrics": {"f1": {"value": "fast"}}}),
        ("POST", "/v1/leases/x/heartbeat", worker_headers, {}),
        ("POST", "/v1/workers/register", worker_headers, {"name": ""}),
        ("POST", "/v1/tokens", api.admin, {"name": "x", "role": "god"}),
        ("POST", "/v1/tokens", api.admin, {"name": "x", "team": "missing"}),
        ("POST", "/v1/teams", api.admin, {"name": "bad name!"}),
    ]
    for method, path, headers, body in requests:
        r = api.client.request(method, path, headers=headers, json=body)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        assert r.json()["error"]["message"], (path, r.text)
