"""Warm start: a study measures the front of an earlier study of the same kernel (and the
configurations it lists) right after its baseline, through the API."""

from __future__ import annotations

from typing import Any

from conftest import Api, study_doc
from fake_worker import result_for


def trials_of(api: Api, study_id: int) -> list[dict[str, Any]]:
    page = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": "1000"}, headers=api.admin).json()
    return sorted(page["items"], key=lambda t: t["number"])


def test_a_study_measures_the_earlier_front_first(api: Api) -> None:
    earlier = api.create_study(sampler={"name": "auto", "seed": 3}, budget={"max_trials": 30})
    api.run_worker(api.worker(), result_for)
    front = api.client.get(f"/v1/studies/{earlier['id']}/front", headers=api.admin).json()["trials"]
    baseline = {"x": 0.5, "y": 3}
    best_first = [t["config"] for t in sorted(front, key=lambda t: t["values"]["f1"]) if t["config"] != baseline]
    assert len(best_first) >= 3

    warm = {"studies": [earlier["id"]], "trials": 3, "configs": [{"x": 0.9}]}
    study = api.create_study(sampler={"name": "auto", "seed": 4, "warm_start": warm}, budget={"max_trials": 12},
                             parallelism=2)
    expected = [{"x": 0.9, "y": 3}, *best_first[:3]]
    assert study["document"]["sampler"]["warm_start"]["configs"] == expected
    api.run_worker(api.worker(), result_for)
    configs = [t["config"] for t in trials_of(api, study["id"])]
    assert configs[0] == baseline and configs[1:5] == expected
    assert len({str(sorted(c.items())) for c in configs}) == 12  # then the sampler's own, none repeated


def test_warm_start_is_refused_clearly(api: Api) -> None:
    earlier = api.create_study(budget={"max_trials": 2})
    outsider = api.headers(api.token(team="other"))
    cases: list[tuple[dict[str, Any], dict[str, str], str]] = [
        (study_doc(sampler={"name": "auto", "warm_start": {"studies": [earlier["id"]]}}), outsider,
         "sampler.warm_start.studies.0"),
        (study_doc(kernel={"backend": "python", "source": "tests.fake:other"},
                   sampler={"name": "auto", "warm_start": {"studies": [earlier["id"]]}}), api.admin,
         "sampler.warm_start.studies.0"),
        (study_doc(sampler={"name": "auto", "warm_start": {"configs": [{"x": 2.0}]}}), api.admin,
         "sampler.warm_start.configs.0.x"),
        (study_doc(sampler={"name": "auto", "warm_start": {"configs": [{"z": 1}]}}), api.admin,
         "sampler.warm_start.configs.0.z"),
        (study_doc(space=[{"name": "y", "type": "int", "low": 1, "high": 3, "default": 1}],
                   sampler={"name": "grid", "warm_start": {"configs": [{"y": 2}]}}), api.admin,
         "sampler.warm_start"),
    ]
    for doc, headers, field in cases:
        r = api.client.post("/v1/studies", json=doc, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field, r.text
