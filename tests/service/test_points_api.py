"""The columnar points of a study (`GET /v1/studies/{id}/points`) on SQLite and Postgres,
checked against the per-trial endpoint's rows of the same study, whole and followed with
`since` while the study runs."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Api
from fake_worker import result_for
from test_screening_api import RT_E, SPACE, energy_worker, scripted

from service.trials import queries
from service.trials.schemas import PointsOut


def points(api: Api, study_id: int, since: int = 0, headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = api.client.get(f"/v1/studies/{study_id}/points", params={"since": since}, headers=headers or api.admin)
    assert r.status_code == 200, r.text
    PointsOut.model_validate_json(r.text)  # what the OpenAPI document says it is
    body: dict[str, Any] = r.json()
    n = len(body["numbers"])
    columns = [body["on_front"], body["feasible"], body["screened_out"], *body["values"].values()]
    assert all(len(column) == n for column in columns)
    assert list(body["values"]) == body["objectives"]
    return body


def by_number(body: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """One row per trial out of the columns."""
    return {number: {"values": {name: column[i] for name, column in body["values"].items()},
                     "on_front": body["on_front"][i], "feasible": body["feasible"][i],
                     "screened_out": body["screened_out"][i]}
            for i, number in enumerate(body["numbers"])}


def reference(api: Api, study_id: int, objectives: list[str]) -> dict[int, dict[str, Any]]:
    """The same trials from the per-trial endpoint."""
    items, cursor = [], None
    while True:
        query = {"state": "completed,screened_out", "limit": "9", **({"cursor": cursor} if cursor else {})}
        page = api.client.get(f"/v1/studies/{study_id}/trials", params=query, headers=api.admin).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return {t["number"]: {"values": t["values"] or dict.fromkeys(objectives),
                          "on_front": t["on_front"], "feasible": t["feasible"],
                          "screened_out": t["state"] == "screened_out"}
            for t in items}


def test_points_are_the_trials_values_as_columns_and_since_sends_what_changed(api: Api) -> None:
    study = api.create_study(constraints=[{"metric": "power_w", "op": "<=", "value": 130.0}],
                             budget={"max_trials": 40, "max_failed_trials": 40}, parallelism=3)
    study_id = study["id"]

    def results(trial: dict[str, Any]) -> dict[str, Any]:
        if trial["number"] % 7 == 3:
            return {"status": "failed", "failure_reason": "compile_error", "message": "boom"}
        return result_for(trial)

    worker = energy_worker(api)  # the constraint is on power
    assert points(api, study_id)["numbers"] == []
    api.run_worker(worker, results, limit=16)
    first = points(api, study_id)
    assert sorted(by_number(first)) == sorted(reference(api, study_id, ["f1", "f2"]))
    assert first["baseline"] == 0

    api.run_worker(worker, results)
    assert api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()["state"] == "completed"
    whole = points(api, study_id)
    expected = reference(api, study_id, ["f1", "f2"])
    assert by_number(whole) == expected  # the same values to the last bit, front flags and feasibility
    assert len(whole["numbers"]) == 40 - 6  # the failed trials are not plotted
    assert any(not row["feasible"] for row in expected.values()) and any(row["on_front"] for row in expected.values())
    for number, row in by_number(whole).items():
        assert row["feasible"] == (100.0 + 50.0 * row["values"]["f1"] <= 130.0), number  # power_w, f1 = x
    assert whole["baseline"] == 0 and whole["objectives"] == ["f1", "f2"]

    # What changed after the first answer, merged into it, is the whole of it: the trials
    # that completed since and the earlier ones whose front membership changed.
    later = points(api, study_id, since=first["cursor"])
    assert later["cursor"] == whole["cursor"] > first["cursor"]
    assert later["baseline"] is None  # the baseline has not changed since
    merged = {**by_number(first), **by_number(later)}
    assert merged == expected
    left = {n for n, row in by_number(first).items() if row["on_front"] and not expected[n]["on_front"]}
    assert left <= set(later["numbers"])
    assert set(later["numbers"]) - left == set(expected) - set(by_number(first))

    nothing = points(api, study_id, since=whole["cursor"])
    assert (nothing["numbers"], nothing["cursor"]) == ([], whole["cursor"])


def test_an_older_sqlite_gets_the_same_points(sqlite_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SQLite's `->` (before 3.38) the stored values objects are split in Python."""
    api = sqlite_api
    study = api.create_study(budget={"max_trials": 20})
    api.run_worker(api.worker(), result_for)
    arrow = points(api, study["id"])
    monkeypatch.setattr(queries, "SQLITE_ARROW", False)
    assert points(api, study["id"]) == arrow
    assert by_number(arrow) == reference(api, study["id"], ["f1", "f2"])


def test_screened_out_trials_are_listed_without_values(api: Api) -> None:
    study = api.create_study(
        space=SPACE, objectives=RT_E, kernel={"backend": "python", "source": "tests.fake:objective"},
        sampler={"name": "random", "seed": 3}, budget={"max_trials": 30}, parallelism=3, measure={"screen": {}},
    )
    api.run_workers([energy_worker(api)], scripted([]))
    body = points(api, study["id"])
    rows = by_number(body)
    assert rows == reference(api, study["id"], ["runtime_ms", "energy_mj"])
    out = [row for row in rows.values() if row["screened_out"]]
    assert out and all(row["values"] == {"runtime_ms": None, "energy_mj": None} for row in out)
    progress = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()["progress"]
    assert (len(rows) - len(out), len(out)) == (progress["completed"], progress["screened_out"])


def test_points_are_the_teams_and_since_is_checked(api: Api) -> None:
    study = api.create_study(budget={"max_trials": 4})
    other = api.headers(api.token(role="viewer", team="other"))
    r = api.client.get(f"/v1/studies/{study['id']}/points", headers=other)
    assert r.status_code == 404, r.text
    viewer = api.headers(api.token(role="viewer"))
    assert points(api, study["id"], headers=viewer)["numbers"] == []
    r = api.client.get(f"/v1/studies/{study['id']}/points", params={"since": -1}, headers=api.admin)
    assert r.status_code == 422 and "since" in r.text, r.text
