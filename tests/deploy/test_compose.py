"""docker-compose.yml against the Compose specification's JSON schema (the copy that the
check-jsonschema package ships), and its wiring: one migration before the replicas, a
worker token provisioned into a volume the worker reads, Prometheus and Grafana pointed at
the right files and services."""

from __future__ import annotations

import copy
import importlib.resources
import json
import shlex
from typing import Any

import jsonschema
import pytest
import yaml
from dockerfiles import effective, stages
from helpers import REPO

COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # resolves the anchors and `<<` merges as Compose does


def _validator() -> jsonschema.protocols.Validator:
    text = importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema = json.loads(text.read_text())
    assert schema["title"] == "Compose Specification"
    return jsonschema.validators.validator_for(schema)(schema)


def test_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    validator = _validator()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, errors
    broken = copy.deepcopy(compose)  # the schema does reject what Compose would
    broken["services"]["api-1"]["depends_on"]["migrate"]["condition"] = "service_finished"
    assert any(True for _ in validator.iter_errors(broken))


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def _target(service: dict[str, Any]) -> str | None:
    build = service.get("build")
    return build.get("target") if isinstance(build, dict) else None


def _replicas(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services that run the image's default command, the control plane."""
    return {name: s for name, s in compose["services"].items()
            if _target(s) == "control-plane" and "command" not in s}


def test_migrations_run_once_before_the_replicas(compose: dict[str, Any]) -> None:
    services = compose["services"]
    migrators = [name for name, s in services.items() if _command(s)[:3] == ["paretune", "db", "upgrade"]]
    assert migrators == ["migrate"]
    migrate = services["migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    replicas = _replicas(compose)
    assert len(replicas) >= 2
    all_stages = stages(REPO / "Dockerfile")
    assert effective(all_stages, "control-plane", "CMD")[:2] == ("paretune", "serve")
    for name, replica in replicas.items():
        assert replica["environment"]["PARETUNE_MIGRATE_ON_START"] == "false", name
        assert replica["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
        assert replica["environment"]["PARETUNE_DATABASE_URL"] == migrate["environment"]["PARETUNE_DATABASE_URL"]


def test_every_condition_can_be_met(compose: dict[str, Any]) -> None:
    services = compose["services"]
    dockerfile_stages = stages(REPO / "Dockerfile")
    for name, service in services.items():
        if _target(service):
            assert _target(service) in dockerfile_stages, f"{name} builds a stage the Dockerfile lacks"
        depends = service.get("depends_on", {})
        for needed, rule in (depends.items() if isinstance(depends, dict) else []):
            other = services[needed]
            if rule["condition"] == "service_healthy":
                has_check = "healthcheck" in other or (
                    _target(other) and effective(dockerfile_stages, _target(other), "HEALTHCHECK"))
                assert has_check, f"{name} waits for {needed} to be healthy, which has no health check"
            if rule["condition"] == "service_completed_successfully":
                assert other.get("restart") == "no", f"{needed} must be a one-shot service for {name} to wait on"


def test_the_worker_reads_a_token_that_a_one_shot_service_wrote(compose: dict[str, Any]) -> None:
    services = compose["services"]
    writer, worker = services["worker-token"], services["worker-cpu"]
    script = _command(writer)[-1]
    assert "paretune token create --worker --pool default" in script
    token_file = next(word.split("=", 1)[1] for word in script.split() if word.startswith("file="))
    volume, mount = writer["volumes"][0].split(":")[:2]
    assert token_file.startswith(mount + "/") and volume in compose["volumes"]
    assert writer["depends_on"]["migrate"]["condition"] == "service_completed_successfully"

    command = _command(worker)
    assert command[:2] == ["paretune", "worker"]
    assert command[command.index("--token-file") + 1] == token_file
    assert command[command.index("--pool") + 1] == "default"
    assert f"{volume}:{mount}:ro" in worker["volumes"]
    assert worker["depends_on"]["worker-token"]["condition"] == "service_completed_successfully"
    server = command[command.index("--server") + 1]
    host = server.removeprefix("http://").split(":")[0]
    assert host in _replicas(compose) and worker["depends_on"][host]["condition"] == "service_healthy"
    assert _target(worker) == "cpu-worker"
    assert "PARETUNE_DATABASE_URL" not in (worker.get("environment") or {}), "workers never get database credentials"


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> repository file or folder, for bind mounts of the repository."""
    out = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            assert (REPO / source).exists(), f"{source} is mounted but missing"
            out[target] = source
    return out


def test_prometheus_scrapes_every_replica_and_loads_the_alerts(compose: dict[str, Any]) -> None:
    mounts = _mounts(compose["services"]["prometheus"])
    config = yaml.safe_load((REPO / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"paretune-api", "paretune-scheduler"}
    assert all(job["metrics_path"] == "/metrics" for job in jobs.values())
    targets = {t for group in jobs["paretune-api"]["static_configs"] for t in group["targets"]}
    assert targets == {f"{name}:8000" for name in _replicas(compose)}
    for rule_file in config["rule_files"]:
        assert rule_file in mounts, f"Prometheus loads {rule_file}, which is not mounted"
        assert yaml.safe_load((REPO / mounts[rule_file]).read_text())["groups"]


def test_a_scheduler_process_steps_the_studies_and_prometheus_watches_it(compose: dict[str, Any]) -> None:
    """The replicas step nothing; the scheduler service does, woken through Redis; the
    alert that fires when no scheduler answers queries the job Prometheus scrapes it as."""
    services = compose["services"]
    (name,) = [n for n, s in services.items() if _command(s)[:2] == ["paretune", "scheduler"]]
    scheduler = services[name]
    command = _command(scheduler)
    port = command[command.index("--metrics-port") + 1]
    assert _target(scheduler) == "control-plane"
    environment = scheduler["environment"]
    assert environment["PARETUNE_REDIS_URL"] and environment["PARETUNE_MIGRATE_ON_START"] == "false"
    assert scheduler["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert f"127.0.0.1:{port}/metrics" in " ".join(scheduler["healthcheck"]["test"])
    for replica in _replicas(compose).values():
        assert replica["environment"]["PARETUNE_SCHEDULER_PROCESS"] == "true"
        assert replica["environment"]["PARETUNE_REDIS_URL"] == scheduler["environment"]["PARETUNE_REDIS_URL"]
    mounts = _mounts(services["prometheus"])
    config = yaml.safe_load((REPO / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "paretune-scheduler"]
    assert {t for group in job["static_configs"] for t in group["targets"]} == {f"{name}:{port}"}
    rules = yaml.safe_load((REPO / mounts["/etc/prometheus/alerts.yml"]).read_text())
    (down,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "ParetuneSchedulerDown"]
    assert 'job="paretune-scheduler"' in down["expr"]


def test_grafana_is_provisioned_with_the_dashboard(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = _mounts(grafana)
    provisioning = REPO / mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["url"] == "http://prometheus:9090" and datasource["isDefault"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "paretune.yml").read_text())["providers"]
    dashboards = [target for target in mounts if target.startswith(provider["options"]["path"] + "/")]
    assert dashboards, "no dashboard is mounted where the provider reads"
    for target in dashboards:
        assert json.loads((REPO / mounts[target]).read_text())["uid"] == "paretune"
