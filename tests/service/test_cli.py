"""The `paretune` command line against a running service."""

from __future__ import annotations

import json
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
        assert run(client, register(client), wait_s=2.0) == 8

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


def test_compare_prints_each_front_against_its_baseline_and_the_differences(live_sqlite_service: LiveService,
                                                                            tmp_path: Path) -> None:
    service = live_sqlite_service
    env = {"PARETUNE_SERVER": service.url, "PARETUNE_TOKEN": service.admin_token, "COLUMNS": "200"}
    document = yaml.safe_load(STUDY_YAML)
    ids = []
    for pool, gpu in (("default", "NVIDIA H200"), ("h100", "NVIDIA H100")):
        token = service.make_worker_token(pool)
        with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {token}"}) as client:
            worker = client.post("/v1/workers/register", json={"name": gpu, "pool": pool, "fingerprint": {
                "backends": ["python"], "gpu_name": gpu, "compilers": {"triton": "3.5.0"}}}).json()["worker_id"]
            with service.client() as api:
                ids.append(api.post("/v1/studies", json={**document, "pool": pool}).json()["id"])
            assert run(client, worker, wait_s=1.0) == 8

    printed = run_cli("compare", *map(str, ids), env=env)
    assert printed.returncode == 0, printed.stderr
    data = json.loads(run_cli("compare", *map(str, ids), "--json", env=env).stdout)
    with service.client() as api:
        assert data == api.get("/v1/compare", params={"studies": f"{ids[0]},{ids[1]}"}).json()
    out = printed.stdout
    assert f"study {ids[0]}: cli study (completed; NVIDIA H200; pool default)" in out
    assert f"study {ids[1]}: cli study (completed; NVIDIA H100; pool h100)" in out
    for study in data["studies"]:
        baseline = study["baseline"]
        block = out.split(f"study {study['id']}: ")[1]
        for point in study["points"]:  # each row: trial, raw values, ratios worked out here
            ratios = [f"{point['values'][n] / baseline[n]:.3f}x" for n in ("f1", "f2")]
            row = next(line for line in block.splitlines() if line.split("│")[1:2] and
                       line.split("│")[1].strip().split(" ")[0] == str(point["number"]))
            cells = [c.strip() for c in row.split("│")[1:-1]]
            assert cells[1:] == [f"{point['values']['f1']:.4g}", f"{point['values']['f2']:.4g}", *ratios], row
    assert (f"differences:\n  gpu: study {ids[0]}: NVIDIA H200; study {ids[1]}: NVIDIA H100\n"
            f"  pool: study {ids[0]}: default; study {ids[1]}: h100") in out

    one = run_cli("compare", str(ids[0]), env=env)
    assert one.returncode == 1 and "1 study listed: compare 2 to 6 studies" in one.stderr
