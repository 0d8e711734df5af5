"""A study document is answered with all of its errors at once: the schema's (an inverted
range, a negative budget, parallelism 0) and the names nothing knows (an objective, a
built-in kernel, a pool), each naming its field; the CLI prints every one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Api
from helpers import run_cli

FIVE_MISTAKES: dict[str, Any] = {
    "name": "five mistakes",
    "kernel": {"backend": "cpu", "builtin": "matmul"},
    "space": [{"name": "BLOCK", "type": "int", "low": 64, "high": 16}],  # inverted range
    "objectives": ["runtime_ms", "throughput_gflops"],  # no such objective
    "budget": {"max_trials": -5},  # negative budget
    "parallelism": 0,
    "pool": "gpu-h200-typo",  # no such pool
}
FIELDS = {"space", "objectives.1.name", "budget.max_trials", "parallelism", "pool"}


def fields_of(errors: list[dict[str, str]]) -> set[str]:
    """The field of each error, a space parameter's error counted at the space."""
    return {"space" if e["field"].startswith("space") else e["field"] for e in errors}


def test_five_mistakes_five_errors_each_naming_its_field(api: Api) -> None:
    r = api.client.post("/v1/studies", json=FIVE_MISTAKES, headers=api.admin)
    assert r.status_code == 422, r.text
    errors = r.json()["error"]["errors"]
    assert len(errors) == 5, errors
    assert fields_of(errors) == FIELDS
    by_field = {("space" if e["field"].startswith("space") else e["field"]): e["message"] for e in errors}
    assert "throughput_gflops" in by_field["objectives.1.name"] and "runtime_ms" in by_field["objectives.1.name"]
    assert "gpu-h200-typo" in by_field["pool"] and "default" in by_field["pool"]  # what to use instead
    assert "greater than or equal to 1" in by_field["parallelism"]


def test_names_are_found_beside_each_other_when_the_schema_is_right(api: Api) -> None:
    document = {"name": "names", "kernel": {"backend": "cpu", "builtin": "matmull"},
                "objectives": ["runtime_ms", "energy_joules"],
                "constraints": [{"metric": "p999_ms", "op": "<=", "value": 1.0}]}
    errors = api.client.post("/v1/studies", json=document, headers=api.admin).json()["error"]["errors"]
    assert {e["field"] for e in errors} == {"kernel.builtin", "objectives.1.name", "constraints.0.metric"}


def test_a_pool_is_known_once_a_worker_token_is_for_it(api: Api) -> None:
    document = {"name": "pool", "kernel": {"backend": "cpu", "builtin": "matmul"}, "objectives": ["runtime_ms"],
                "pool": "h200"}
    refused = api.client.post("/v1/studies", json=document, headers=api.admin)
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "pool"
    api.token(kind="worker", pool="h200")
    assert api.client.post("/v1/studies", json=document, headers=api.admin).status_code == 201


def test_the_cli_prints_every_error(live_service: Any, tmp_path: Path) -> None:
    (tmp_path / "study.json").write_text(json.dumps(FIVE_MISTAKES))
    out = run_cli("study", "create", "-f", str(tmp_path / "study.json"), "--server", live_service.url,
                  "--token", live_service.admin_token)
    assert out.returncode == 1
    listed = [line.strip()[2:] for line in out.stderr.splitlines() if line.strip().startswith("- ")]
    assert len(listed) == 5, out.stderr
    assert fields_of([{"field": line.split(":")[0]} for line in listed]) == FIELDS
    assert "5 errors" in out.stderr
