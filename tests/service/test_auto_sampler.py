"""The `auto` sampler through the HTTP API: it becomes what docs/api.md says, its sampler sees
numeric choices in order while workers and the API see the choice values themselves, and a
seeded study proposes the same configurations every time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import Api
from fake_worker import result_for
from optuna.distributions import CategoricalDistribution, IntDistribution

from service.store.models import Study

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SPACE = [
    {"name": "x", "type": "categorical", "choices": [1.0, 0.25, 0.5, 0.0, 0.75], "default": 0.5},
    {"name": "y", "type": "categorical", "choices": [10, 1, 4, 7], "default": 4},
    {"name": "opt", "type": "categorical", "choices": ["-O2", "-O3"], "default": "-O2"},
    {"name": "unroll", "type": "bool", "default": False},
]


def documented_auto(objectives: str) -> dict[str, Any]:
    """The sampler document docs/api.md says `auto` becomes."""
    pattern = rf"^- `auto` with {objectives}: `(\{{.*\}})`"
    match = re.search(pattern, DOCS.read_text(), re.MULTILINE)
    assert match, f"docs/api.md names no sampler for `auto` with {objectives}"
    return json.loads(match.group(1))  # type: ignore[no-any-return]


def stored_sampler(api: Api, study_id: int) -> dict[str, Any]:
    doc = api.client.get(f"/v1/studies/{study_id}", headers=api.admin).json()["document"]
    return {k: v for k, v in doc["sampler"].items() if k != "seed" and v is not None}


def configs(api: Api, study_id: int) -> list[dict[str, Any]]:
    page = api.client.get(f"/v1/studies/{study_id}/trials", params={"limit": "1000"}, headers=api.admin).json()
    return [t["config"] for t in sorted(page["items"], key=lambda t: t["number"])]


def mirror_of(api: Api, study_id: int) -> Any:
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.read() as session:
        return state.cache.get(session, session.get(Study, study_id))


def test_auto_becomes_the_documented_sampler(api: Api) -> None:
    multi = api.create_study(space=SPACE, sampler={"name": "auto", "seed": 1})
    assert stored_sampler(api, multi["id"]) == documented_auto("two or more objectives")
    single = api.create_study(space=SPACE, objectives=["f1"], sampler={"name": "auto", "seed": 1})
    assert stored_sampler(api, single["id"]) == documented_auto("one objective")
    # built-ins over a finite space: with a structure model (the GEMM's own space) and without (the cpu matmul's
    # tiles as bench/cpu_sweep.py sweeps them)
    tiles = [{"name": "TILE_M", "type": "categorical", "choices": [4, 8, 16, 32, 64], "default": 16},
             {"name": "TILE_N", "type": "categorical", "choices": [16, 64, 256], "default": 64},
             {"name": "opt", "type": "categorical", "choices": ["-O2", "-O3"], "default": "-O2"}]
    gemm, matmul = {"backend": "triton", "builtin": "gemm_bf16"}, {"backend": "cpu", "builtin": "matmul"}
    for kernel, space, objectives in ((gemm, None, ["runtime_ms"]), (gemm, None, ["runtime_ms", "energy_mj"]),
                                      (matmul, tiles, ["runtime_ms"]), (matmul, tiles, ["runtime_ms", "latency_ms"])):
        doc = {"name": "built-in", "kernel": kernel, "objectives": objectives, **({"space": space} if space else {})}
        r = api.client.post("/v1/studies", json=doc, headers=api.admin)
        assert r.status_code == 201, r.text
        assert stored_sampler(api, r.json()["id"]) == documented_auto("a built-in kernel")
    # the cpu matmul's own space is too large to enumerate: what its objectives say
    doc = {"name": "built-in", "kernel": matmul, "objectives": ["runtime_ms", "latency_ms"]}
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert stored_sampler(api, r.json()["id"]) == documented_auto("two or more objectives")
    # options given with auto are laid over its own; ordered_choices can be turned off
    tuned = api.create_study(space=SPACE, sampler={"name": "auto", "options": {"population_size": 12},
                                                   "ordered_choices": False})
    expected = documented_auto("two or more objectives")
    expected["options"]["population_size"] = 12
    assert stored_sampler(api, tuned["id"]) == {**expected, "ordered_choices": False}
    # a named sampler keeps categorical choices unordered unless asked
    named = api.create_study(space=SPACE, sampler={"name": "nsga2", "seed": 1})
    assert stored_sampler(api, named["id"]) == {"name": "nsga2", "options": {}, "ordered_choices": False}


def test_the_sampler_sees_indexes_and_workers_the_choice_values(api: Api) -> None:
    study = api.create_study(space=SPACE, sampler={"name": "auto", "seed": 4}, budget={"max_trials": 24},
                             parallelism=3)
    api.run_worker(api.worker(), result_for)
    seen = configs(api, study["id"])
    assert len(seen) == 24
    choices = {p["name"]: p.get("choices", [False, True]) for p in SPACE}
    for config in seen:
        for name, value in config.items():
            assert any(type(value) is type(c) and value == c for c in choices[name]), (name, value)
    mirror = mirror_of(api, study["id"])
    assert mirror.distributions["x"] == IntDistribution(0, 4)
    assert mirror.distributions["y"] == IntDistribution(0, 3)
    assert mirror.distributions["opt"] == CategoricalDistribution(("-O2", "-O3"))
    # the sampler was told every trial, under its index parameters
    told = [t for t in mirror.optuna.trials if t.state.name == "COMPLETE"]
    assert sorted(json.dumps(t.params, sort_keys=True) for t in told) == sorted(
        json.dumps(mirror.view.to_sampler(c), sort_keys=True) for c in seen)
    assert {t.params["x"] for t in told} <= set(range(5))
    # a rebuilt mirror (another replica, a restart) reads the same from the table
    api.client.app.state.paretune.cache.drop(study["id"])  # type: ignore[attr-defined]
    rebuilt = mirror_of(api, study["id"])
    assert sorted(json.dumps(t.params, sort_keys=True) for t in rebuilt.optuna.trials
                  if t.state.name == "COMPLETE") == sorted(
        json.dumps(t.params, sort_keys=True) for t in told)


@pytest.mark.parametrize("objectives", [["f1", "f2"], ["f1"]])
def test_a_seeded_auto_study_proposes_the_same_configurations(api: Api, objectives: list[str]) -> None:
    # one trial at a time, so that every proposal follows the same tells whatever the timing
    def run(seed: int) -> list[dict[str, Any]]:
        study = api.create_study(space=SPACE, objectives=objectives, sampler={"name": "auto", "seed": seed},
                                 budget={"max_trials": 20}, parallelism=1)
        api.run_worker(api.worker(), result_for)
        return configs(api, study["id"])

    first, again, other = run(11), run(11), run(12)
    assert first == again
    assert first != other


def test_genetic_operators_are_named_in_the_document(api: Api) -> None:
    study = api.create_study(space=SPACE, sampler={"name": "nsga2", "seed": 2, "ordered_choices": True,
                                                   "options": {"population_size": 4, "crossover": "sbx",
                                                               "mutation": "polynomial"}},
                             budget={"max_trials": 16})
    api.run_worker(api.worker(), result_for)
    assert len(configs(api, study["id"])) == 16
    for sampler, field in ((
            {"name": "nsga2", "options": {"mutation": "gaussian"}}, "sampler.options.mutation"),
            ({"name": "tpe", "options": {"crossover": "sbx"}}, "sampler.options.crossover")):
        doc = {"name": "bad", "kernel": {"backend": "python", "source": "tests.fake:objective"}, "space": SPACE,
               "objectives": ["f1", "f2"], "sampler": sampler}
        r = api.client.post("/v1/studies", json=doc, headers=api.admin)
        assert r.status_code == 422, r.text
        assert field in r.text
