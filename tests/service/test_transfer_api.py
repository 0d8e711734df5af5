"""Transfer through the API (warm_start: related): a study of a new shape measures the best
configurations of related studies first, nearest shape first, and says so; another team's
studies are read only where their owners share them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import Api

SPACE = [{"name": "TILE_M", "type": "categorical", "choices": [4, 8, 16, 32], "default": 16},
         {"name": "opt", "type": "categorical", "choices": ["-O2", "-O3"], "default": "-O2"}]
BASELINE = {"TILE_M": 16, "opt": "-O2"}


def measured(trial: dict[str, Any]) -> dict[str, Any]:
    """A made-up kernel whose best tile grows with the shape: log2(TILE_M) best at log2(n)/2 + 0.2;
    -O3 is faster per call (runtime) and slower cold (latency) than -O2, so a study's front is
    its best tile under each."""
    n = trial["kernel"]["workload"][0]["dims"]["n"]
    base = 1.0 + (math.log2(trial["config"]["TILE_M"]) - (math.log2(n) / 2 + 0.2)) ** 2
    o3 = trial["config"]["opt"] == "-O3"
    values = {"runtime_ms": base if o3 else base + 0.5, "latency_ms": base + (0.8 if o3 else 0.5)}
    return {"status": "completed", "metrics": {k: {"value": v} for k, v in values.items()}}


def doc(n: int, **changes: Any) -> dict[str, Any]:
    kernel = {"backend": "cpu", "builtin": "matmul", "workload": [{"dims": {"n": n}}]}
    return {"name": f"matmul n={n}", "kernel": kernel,
            "space": SPACE, "objectives": ["runtime_ms", "latency_ms"], "budget": {"max_trials": 8},
            "sampler": {"name": "random", "seed": 1}, "parallelism": 2, **changes}


def create(api: Api, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    r = api.client.post("/v1/studies", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def looked(api: Api, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """What a study would start from: it is cancelled before any trial is measured."""
    study = create(api, body, headers)
    assert api.client.post(f"/v1/studies/{study['id']}/cancel", headers=headers).status_code == 200
    return study["warm_start"]  # type: ignore[no-any-return]


def swept(api: Api, n: int, headers: dict[str, str], worker: tuple[dict[str, str], int], **changes: Any) -> int:
    """A study of shape n over the whole space (grid: every configuration), run to the end."""
    study = create(api, doc(n, sampler={"name": "grid"}, budget={"max_trials": 100}, **changes), headers)
    # a grid walks the grid
    assert study["warm_start"] == {"mode": "none", "configs": [], "sources": [], "learned_from": []}
    api.run_worker(worker, measured)
    return int(study["id"])


def trial_configs(api: Api, study_id: int) -> list[dict[str, Any]]:
    page = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": "100"}, headers=api.admin).json()
    return [t["config"] for t in sorted(page["items"], key=lambda t: t["number"])]


def test_a_new_shape_starts_from_the_nearest_shapes_best(api: Api) -> None:
    worker = api.worker(("cpu",))
    near = swept(api, 64, api.admin, worker)  # distance 1 from n=128: best tile 8 (log2 3.2)
    far = swept(api, 1024, api.admin, worker)  # distance 3: best tile 32 (log2 5.2)

    study = create(api, doc(128), api.admin)  # warm_start left out: related, for a built-in
    # n=64 ranks its front (8 -O3, 8 -O2) then 16 -O3 (1.64), 16 -O2 (the baseline: skipped), ...:
    # scores 1, 2, 3, 4; n=1024 ranks 32 -O3 first: score 3, after the nearer study's third
    expected = [{"TILE_M": 8, "opt": "-O3"}, {"TILE_M": 8, "opt": "-O2"}, {"TILE_M": 16, "opt": "-O3"},
                {"TILE_M": 32, "opt": "-O3"}]
    warm = study["warm_start"]
    assert warm["mode"] == "related" and warm["configs"] == expected
    assert [(s["study"], s["distance"], s["team"]) for s in warm["sources"]] == \
        [(near, 1.0, True), (near, 1.0, True), (near, 1.0, True), (far, 3.0, True)]
    assert warm["sources"][0]["values"] == pytest.approx({"runtime_ms": 1.04, "latency_ms": 1.84})
    assert warm["sources"][3]["workload"] == [{"dims": {"n": 1024}, "weight": 1.0}]
    api.quiesce()
    api.run_worker(worker, measured)
    configs = trial_configs(api, study["id"])
    assert configs[0] == BASELINE and configs[1:5] == expected
    assert len({str(sorted(c.items())) for c in configs}) == 8  # then the sampler's own
    page = api.client.get(f"/v1/studies/{study['id']}", headers=api.admin).json()
    assert page["warm_start"] == warm and page["document"]["warm_start_sources"] == warm["sources"]

    cold = create(api, doc(128, warm_start="none"), api.admin)
    assert cold["warm_start"] == {"mode": "none", "configs": [], "sources": [], "learned_from": []}


def test_other_teams_trials_only_where_their_owners_share_them(api: Api) -> None:
    worker = api.worker(("cpu",))
    ours = api.headers(api.token(team="ours"))
    theirs = api.headers(api.token(team="theirs"))
    mine = swept(api, 64, ours, worker)
    unshared = swept(api, 128, theirs, worker)  # the very shape, but not shared: never read
    first = looked(api, doc(128), ours)
    assert {s["study"] for s in first["sources"]} == {mine}

    shared = swept(api, 2048, theirs, worker, share_trials=True)  # shared, farther (distance 4)
    again = looked(api, doc(128), ours)
    # ours scores 1, 2, 3 (and 4: the baseline, skipped); the shared one's best scores 4
    assert [(s["study"], s["team"]) for s in again["sources"]] == \
        [(mine, True), (mine, True), (mine, True), (shared, False)]
    assert again["configs"][3] == {"TILE_M": 32, "opt": "-O3"}
    wider = looked(api, doc(4096), ours)  # distance 6 from n=64, 1 from the shared n=2048
    assert [s["study"] for s in wider["sources"]] == [shared] * 4
    assert unshared not in {s["study"] for s in [*first["sources"], *again["sources"], *wider["sources"]]}


def test_an_lfbo_study_learns_from_every_related_study_it_may_read(api: Api) -> None:
    """Its classifier learns from the related studies' trials, the far ones too, its team's and
    those shared with it; another sampler does not, nor does `warm_start: none`."""
    worker = api.worker(("cpu",))
    ours = api.headers(api.token(team="learners"))
    theirs = api.headers(api.token(team="teachers"))
    near = swept(api, 64, ours, worker)
    far = swept(api, 65536, ours, worker)  # distance 9 from n=128: beyond what a study starts from
    shared = swept(api, 256, theirs, worker, share_trials=True)
    unshared = swept(api, 128, theirs, worker)
    study = create(api, doc(128, sampler={"name": "lfbo", "seed": 1}), ours)
    learned = study["warm_start"]["learned_from"]
    completed = {s: api.client.get(f"/v1/studies/{s}", headers=owner).json()["progress"]["completed"]
                 for s, owner in ((near, ours), (shared, theirs), (far, ours))}
    assert [(s["study"], s["distance"], s["team"], s["trials"]) for s in learned] == \
        [(near, 1.0, True, completed[near]), (shared, 1.0, False, completed[shared]), (far, 9.0, True, completed[far])]
    assert far not in {s["study"] for s in study["warm_start"]["sources"]}
    stored = study["document"]["warm_start_learned"]
    # each study's configurations best first: n=64's front is its best tile (8) under each option
    # (tied on their mean rank), then the front of the rest: tile 16 under each
    configs = stored[0]["configs"]
    assert sorted(c["opt"] for c in configs[:2]) == ["-O2", "-O3"] and {c["TILE_M"] for c in configs[:2]} == {8}
    assert configs[2]["TILE_M"] == 16 and configs[-1]["TILE_M"] == 32
    assert unshared not in {s["study"] for s in learned}
    assert looked(api, doc(128), ours)["learned_from"] == []  # random
    assert looked(api, doc(128, sampler={"name": "lfbo"}, warm_start="none"), ours)["learned_from"] == []
    api.quiesce()
    api.run_worker(worker, measured)  # and it runs: the sampler is built with them
    page = api.client.get(f"/v1/studies/{study['id']}", headers=ours).json()
    assert page["state"] == "completed" and page["progress"]["completed"] == 8


def test_related_warm_start_is_refused_clearly_for_a_grid(api: Api) -> None:
    r = api.client.post("/v1/studies", json=doc(64, sampler={"name": "grid"}, warm_start="related"),
                        headers=api.admin)
    assert r.status_code == 422 and r.json()["error"]["field"] == "warm_start", r.text
    r = api.client.post("/v1/studies", json=doc(64, warm_start="nearby"), headers=api.admin)
    assert r.status_code == 422 and "related" in r.text, r.text
