"""Regression tests, on SQLite and Postgres, for each class of input that once answered a
5xx, a 4xx out of the error shape, or a 4xx that named nothing: ids beyond the database's
integers, NUL characters, NaN and infinities, sampler options Optuna refuses only when it
samples, malformed cursors, odd Last-Event-IDs, oversized and deep bodies."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from conftest import Api, study_doc
from fake_worker import result_for

from service.store.storable import REPLACEMENT

HUGE_IDS = [2**31, 2**63, 10**30]


def error_of(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] and error["message"] and "field" in error, error
    return error  # type: ignore[no-any-return]


def post_json_text(api: Api, path: str, text: str, headers: dict[str, str]) -> Any:
    """A body as written (Python's JSON reader takes NaN and Infinity; others send them)."""
    return api.client.post(path, content=text, headers={**headers, "Content-Type": "application/json"})


@pytest.mark.parametrize("value", HUGE_IDS + [0, -1])
def test_ids_beyond_the_database_integers_are_refused_naming_them(api: Api, value: int) -> None:
    study = api.create_study()
    worker = api.worker()
    paths = [("GET", f"/v1/studies/{value}", "path.study_id"),
             ("POST", f"/v1/studies/{value}/cancel", "path.study_id"),
             ("GET", f"/v1/studies/{value}/front", "path.study_id"),
             ("POST", f"/v1/tokens/{value}/rotate", "path.token_id"),
             ("DELETE", f"/v1/tokens/{value}", "path.token_id")]
    if value != 0:
        paths.append(("GET", f"/v1/studies/{study['id']}/trials/{value}", "path.number"))
    for method, path, field in paths:
        assert error_of(api.client.request(method, path, headers=api.admin), 422)["field"] == field, path
    r = api.client.post("/v1/leases", json={"worker_id": value, "wait_s": 0}, headers=worker[0])
    assert error_of(r, 404)["field"] == "worker_id"
    if value > 0:
        r = api.client.get(f"/v1/studies/{study['id']}/events?follow=false&after={value * 2**33}", headers=api.admin)
        assert error_of(r, 422)["field"] == "query.after"


@pytest.fixture
def leased(api: Api) -> Iterator[tuple[Api, Any, Any]]:
    """A worker and a function that leases it a fresh trial of a long study."""
    api.create_study(budget={"max_trials": 1000}, parallelism=16)
    worker = api.worker()

    def lease() -> dict[str, Any]:
        held = api.lease(worker)
        if held is None:
            api.quiesce()
            held = api.lease(worker)
        assert held is not None
        return held

    yield api, worker, lease


def trial_detail(api: Api, held: dict[str, Any]) -> dict[str, Any]:
    spec = held["trial"]
    r = api.client.get(f"/v1/studies/{spec['study_id']}/trials/{spec['number']}", headers=api.admin)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_nul_characters_in_names_are_refused_naming_the_field(api: Api) -> None:
    worker_headers = api.worker()[0]
    cases = [
        ("/v1/studies", study_doc(name="a\x00b"), "name"),
        ("/v1/studies", study_doc(description="\x00"), "description"),
        ("/v1/studies", study_doc(kernel={"backend": "python", "source": "m:f", "options": {"k\x00": 1}}),
         "kernel.options"),
        ("/v1/tokens", {"name": "a\x00"}, "name"),
        ("/v1/teams", {"name": "a\x00"}, "name"),
    ]
    for path, body, field in cases:
        assert error_of(api.client.post(path, json=body, headers=api.admin), 422)["field"] == field, body
    for body, field in (({"name": "w\x00", "pool": "default"}, "name"), ({"name": "w", "pool": "def\x00ault"}, "pool")):
        r = api.client.post("/v1/workers/register", json={**body, "fingerprint": {}}, headers=worker_headers)
        assert r.status_code in (403, 422) and error_of(r, r.status_code)["field"] == field


def test_nul_characters_in_worker_reports_are_stored_replaced(leased: tuple[Api, Any, Any]) -> None:
    """A kernel that prints NUL bytes must not make its trial unreportable (Postgres text and
    JSONB cannot hold NUL): they are stored as U+FFFD."""
    api, worker, lease = leased
    held = lease()
    r = api.client.post(f"/v1/leases/{held['token']}/heartbeat", json={"phase": "run\x00"}, headers=worker[0])
    assert r.status_code == 200, r.text
    body = result_for(held["trial"])
    body.update(message="out\x00put", log="\x00" * 3, correctness={"k\x00": "v\x00"},
                environment={"gpu": "name\x00"})
    body["metrics"]["f1"]["unit"] = "ms\x00"
    r = api.post_result(worker, held["token"], body)
    assert r.status_code == 200 and r.json()["state"] == "completed", r.text
    detail = trial_detail(api, held)
    assert detail["message"] == f"out{REPLACEMENT}put" and detail["log"] == REPLACEMENT * 3
    assert detail["correctness"] == {f"k{REPLACEMENT}": f"v{REPLACEMENT}"}
    assert detail["metrics"]["f1"]["unit"] == f"ms{REPLACEMENT}"
    r = api.client.post("/v1/workers/register", headers=worker[0],
                        json={"name": "w", "pool": "default", "fingerprint": {"backends": ["python"], "os": "x\x00"}})
    assert r.status_code == 201, r.text
    listed = {w["id"]: w for w in api.client.get("/v1/workers", headers=api.admin).json()}
    assert listed[r.json()["worker_id"]]["fingerprint"]["os"] == f"x{REPLACEMENT}"


NON_FINITE_DOCUMENTS = [
    ('"high": 1.0', '"high": Infinity', "space.0.high"),
    ('"high": 1.0', '"high": 1e999', "space.0.high"),
    ('"low": 0.0', '"low": -Infinity', "space.0.low"),
    ('"default": 0.5', '"default": NaN', "space.0.default"),
    ('"parallelism": 4', '"parallelism": 4, "constraints": [{"metric": "f1", "op": "<=", "value": NaN}]',
     "constraints.0.value"),
    ('"parallelism": 4', '"parallelism": 4, "reference_point": {"f1": Infinity}', "reference_point.f1"),
    ('"source": "tests.fake:objective"', '"source": "tests.fake:objective", "options": {"scale": [1, NaN]}',
     "kernel.options.scale.1"),
]


@pytest.mark.parametrize("case", NON_FINITE_DOCUMENTS, ids=[c[2] for c in NON_FINITE_DOCUMENTS])
def test_nan_and_infinity_in_a_document_are_refused_naming_the_field(api: Api, case: tuple[str, str, str]) -> None:
    old, new, field = case
    text = json.dumps(study_doc())
    assert old in text
    error = error_of(post_json_text(api, "/v1/studies", text.replace(old, new, 1), api.admin), 422)
    assert error["field"] == field and "finite" in error["message"], error


def test_nan_and_infinity_in_results_are_refused_naming_the_field(leased: tuple[Api, Any, Any]) -> None:
    """A worker reports measurements: a metric or a timing that is not a finite number is no
    measurement (docs/security.md), and the report is refused naming it; an environment
    reading that is not a number is kept as null."""
    api, worker, lease = leased
    bad_value = lease()
    r = post_json_text(api, f"/v1/leases/{bad_value['token']}/result",
                       '{"status": "completed", "metrics": {"f1": {"value": NaN}, "f2": {"value": Infinity}}}',
                       worker[0])
    error = error_of(r, 422)
    assert error["field"] == "metrics.f1.value" and "finite" in error["message"], error
    assert "metrics.f2.value" in error["message"]
    assert trial_detail(api, bad_value)["state"] == "running"  # the lease is still the worker's

    values = result_for(bad_value["trial"])["metrics"]
    text = json.dumps({"status": "completed", "metrics": values, "timings": {"measure_s": 1.0}})
    r = post_json_text(api, f"/v1/leases/{bad_value['token']}/result",
                       text.replace('"measure_s": 1.0', '"measure_s": -Infinity'), worker[0])
    assert error_of(r, 422)["field"] == "timings"

    text = json.dumps({"status": "completed", "metrics": values, "timings": {"measure_s": 1.0},
                       "environment": {"temperature": 1.0}})
    text = text.replace('"temperature": 1.0', '"temperature": NaN')
    r = post_json_text(api, f"/v1/leases/{bad_value['token']}/result", text, worker[0])
    assert r.status_code == 200 and r.json()["state"] == "completed", r.text
    detail = trial_detail(api, bad_value)
    assert detail["environment"] == {"temperature": None} and detail["timings"] == {"measure_s": 1.0}
    assert all(math.isfinite(v) for v in detail["values"].values())
    api.quiesce()
    assert api.client.get(f"/v1/studies/{bad_value['trial']['study_id']}/front", headers=api.admin).status_code == 200


SAMPLER_OPTIONS = [
    ("nsga2", {"population_size": 1}, "population_size", "greater than or equal to 2"),  # Optuna's own message
    ("nsga2", {"population_size": 10**9}, "population_size", "between 2 and 10000"),
    ("nsga2", {"crossover_prob": 2.0}, "crossover_prob", "range [0.0, 1.0]"),  # Optuna's own message
    ("nsga2", {"population_size": "ten"}, "population_size", "must be int"),
    ("tpe", {"n_ei_candidates": 0}, "n_ei_candidates", "between 1 and 10000"),
    ("tpe", {"n_ei_candidates": 2**40}, "n_ei_candidates", "between 1 and 10000"),
    ("tpe", {"n_startup_trials": -1}, "n_startup_trials", "between 0"),
    ("tpe", {"prior_weight": -1.0}, "prior_weight", "between 0"),
    ("tpe", {"consider_endpoints": "x"}, "consider_endpoints", "must be bool or None"),
    ("tpe", {"n_startup_trials": True}, "n_startup_trials", "must be int"),
]


@pytest.mark.parametrize("case", SAMPLER_OPTIONS, ids=[f"{c[0]}-{c[2]}-{c[1][c[2]]!r}"[:60] for c in SAMPLER_OPTIONS])
def test_sampler_options_optuna_would_fail_on_later_are_refused(api: Api, case: tuple[str, dict[str, Any], str, str]
                                                                 ) -> None:
    sampler, options, key, message = case
    r = api.client.post("/v1/studies", json=study_doc(sampler={"name": sampler, "options": options}), headers=api.admin)
    error = error_of(r, 422)
    assert error["field"] == f"sampler.options.{key}" and message in error["message"], error


def test_nsga3_reference_points_are_bounded(api: Api) -> None:
    many = [{"name": f"m{i}"} for i in range(8)]
    r = api.client.post("/v1/studies", json=study_doc(objectives=many, sampler={
        "name": "nsga3", "options": {"dividing_parameter": 20}}), headers=api.admin)
    assert "reference points" in error_of(r, 422)["message"]
    r = api.client.post("/v1/studies", json=study_doc(sampler={"name": "nsga3", "options": {"dividing_parameter": 20}}),
                        headers=api.admin)
    assert r.status_code == 201, r.text  # 21 reference points for two objectives


BAD_CURSORS = ["%%%", "W10=", "WyJ4Il0=", "W251bGxd", "WzEuNV0=", "Wzk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5XQ==",
               "eyJhIjogMX0=", "W3RydWVd", "bm90IGpzb24=", "W05hTiwgMV0=", "x" * 512]


def test_malformed_cursors_are_refused(api: Api) -> None:
    sid = api.create_study()["id"]
    for cursor in BAD_CURSORS:
        for sort in ("number", "-f1"):
            r = api.client.get(f"/v1/studies/{sid}/trials", params={"cursor": cursor, "sort": sort}, headers=api.admin)
            assert error_of(r, 422)["field"] in ("cursor", "query.cursor"), (cursor, sort)


@pytest.mark.parametrize("header", ["9" * 30, "-1", "abc", "1" * 99, " 7", "1e3"])
def test_odd_last_event_ids_start_from_the_beginning(api: Api, header: str) -> None:
    sid = api.create_study()["id"]
    r = api.client.get(f"/v1/studies/{sid}/events?follow=false", headers={**api.admin, "Last-Event-ID": header})
    assert r.status_code == 200, r.text
    ids = [int(line[4:]) for line in r.text.splitlines() if line.startswith("id: ")]
    plain = api.client.get(f"/v1/studies/{sid}/events?follow=false", headers=api.admin).text
    assert ids and ids == [int(line[4:]) for line in plain.splitlines() if line.startswith("id: ")]


def test_oversized_and_deep_bodies_are_refused_in_the_error_shape(api: Api) -> None:
    limit = api.settings.max_body_bytes

    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    r = api.client.post("/v1/studies", content=chunks(), headers={**api.admin, "Content-Type": "application/json"})
    assert error_of(r, 413)["field"] == "body"
    r = api.client.post("/v1/studies", content=b"{}", headers={**api.admin, "Content-Type": "application/json",
                                                               "Content-Length": "not-a-number"})
    assert r.status_code in (400, 413) and error_of(r, r.status_code)
    deep = '{"name": ' + "[" * 1000 + "]" * 1000 + "}"
    assert error_of(post_json_text(api, "/v1/studies", deep, api.admin), 422)["field"] == "body"
    for text in ("", "{", "[1, 2]", '"x"', "null"):
        assert error_of(post_json_text(api, "/v1/studies", text, api.admin), 422), text


def test_times_carry_their_zone(api: Api) -> None:
    """SQLite gives stored times back without a zone; the API says they are UTC."""
    study = api.create_study()
    token = api.client.post("/v1/tokens", json={"name": "t", "expires_in": 60}, headers=api.admin).json()
    for value in (study["created_at"], study["updated_at"], token["created_at"], token["expires_at"]):
        assert datetime.fromisoformat(value).utcoffset() is not None, value
