"""The `paretune` command line against a running service."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml
from fake_worker import register, run
from helpers import LiveService, run_cli

STUDY_YAML = """
name: cli study
kernel: {backend: python, source: "tests.fake:objective"}
space:
  - {name: x, type: float, low: 0.0, high: 1.0, default: 0.5}
  - {name: y, type: int, low: 1, high: 10, default: 3}
objectives: [f1, f2]
budget: {max_trials: 8}
parallelism: 2
"""


def test_db_upgrade_is_idempotent(tmp_path: Path) -> None:
    env = {"PARETUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}"}
    for _ in range(2):
        out = run_cli("db", "upgrade", env=env)
        assert out.returncode == 0 and "schema is current" in out.stdout, out.stderr


def test_study_create_watch_and_front(live_sqlite_service: LiveService, tmp_path: Path) -> None:
    service = live_sqlite_service
    doc = tmp_path / "study.yaml"
    doc.write_text(STUDY_YAML)
    env = {"PARETUNE_SERVER": service.url, "PARETUNE_TOKEN": service.admin_token, "COLUMNS": "200"}
    created = run_cli("study", "create", "-f", str(doc), env=env)
    assert created.returncode == 0, created.stderr
    assert "study 1 created (cli study): 8 trials, sampler nsga2" in created.stdout
    link = created.stdout.split()[-1]  # the study's own page
    assert link == f"{service.url}/ui/studies/1" and httpx.get(link).status_code == 200

    token = service.make_worker_token()
    with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert run(client, register(client)) == 8

    watched = run_cli("study", "watch", "1", env=env)
    assert watched.returncode == 0 and "study 1 completed: budget spent" in watched.stdout
    front = run_cli("front", "1", env=env)
    assert front.returncode == 0 and "Pareto front" in front.stdout and "hypervolume" in front.stdout
    listed = run_cli("study", "list", env=env)
    assert "cli study" in listed.stdout and "completed" in listed.stdout


def test_cli_errors_name_the_field(live_sqlite_service: LiveService, tmp_path: Path) -> None:
    service = live_sqlite_service
    bad = yaml.safe_load(STUDY_YAML)
    bad["space"][0]["low"] = 5.0
    doc = tmp_path / "bad.yaml"
    doc.write_text(yaml.safe_dump(bad))
    env = {"PARETUNE_SERVER": service.url, "PARETUNE_TOKEN": service.admin_token, "COLUMNS": "200"}
    out = run_cli("study", "create", "-f", str(doc), env=env)
    assert out.returncode == 1
    assert "422" in out.stderr and "must not be greater than high" in out.stderr and "space.0" in out.stderr
    missing = run_cli("study", "create", "-f", str(tmp_path / "nope.yaml"), env=env)
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    no_token = run_cli("study", "list", env={"PARETUNE_SERVER": service.url, "PARETUNE_TOKEN": ""})
    assert no_token.returncode == 1 and "no token" in no_token.stderr
