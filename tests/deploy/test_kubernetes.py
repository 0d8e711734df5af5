"""deploy/kubernetes: every overlay rendered by `kubectl kustomize`, every Kubernetes object
validated against the Kubernetes schema by kubernetes-validate (strict), the Prometheus
Operator objects against crd_schemas.py, and the wiring between the objects."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from crd_schemas import SCHEMAS
from helpers import REPO

from service.config import Settings
from service.scheduling.process import POOL_SIZE as SCHEDULER_POOL
from service.store.db import MAX_OVERFLOW
from workers.agent.settings import AgentSettings

KUSTOMIZE = REPO / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (KUSTOMIZE / "overlays").glob("*/kustomization.yaml"))
# The oldest release still in common use whose APIs we need (autoscaling/v2, policy/v1), and
# the newest that kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
DRAIN_S = AgentSettings.model_fields["drain_timeout_s"].default


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: `./dev test` installs Debian's kubernetes-client"
    out = subprocess.run([kubectl, "kustomize", str(KUSTOMIZE / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def test_overlays_dev_and_production_exist() -> None:
    assert {"dev", "production"} <= set(OVERLAYS)


def test_every_object_is_valid(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Job", "NetworkPolicy",
            "PrometheusRule", "ServiceMonitor", "ConfigMap"} <= kinds
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in SCHEMAS:
            errors = [e.message for e in jsonschema.Draft202012Validator(SCHEMAS[obj["kind"]]).iter_errors(obj)]
            assert not errors, (where, errors)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{where} is invalid for Kubernetes {version}: {exc.message}") from None


def test_validation_is_strict(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """A misspelt field fails, for both kinds of validation."""
    _, objects = rendered
    deployment = copy.deepcopy(_one(objects, "Deployment", "paretune-api"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/healthz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    rule = copy.deepcopy(_one(objects, "PrometheusRule", "paretune"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "two minutes"
    assert list(jsonschema.Draft202012Validator(SCHEMAS["PrometheusRule"]).iter_errors(rule))


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["template"]["spec"]["containers"]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _secret_refs(pod_spec: dict[str, Any]) -> set[str]:
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for c in pod_spec["containers"] for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})}
    return refs | {v["secret"]["secretName"] for v in pod_spec.get("volumes", []) if "secret" in v}


def test_control_plane(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objects = rendered
    api = _one(objects, "Deployment", "paretune-api")
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    (container,) = _containers(api)
    assert container["args"][:2] == ["paretune", "serve"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PARETUNE_MIGRATE_ON_START"]["value"] == "false"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = _one(objects, "Service", "paretune-api")
    assert _matches(service["spec"]["selector"], pod_labels)
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    hpa = _one(objects, "HorizontalPodAutoscaler", "paretune-api")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "paretune-api"}
    assert hpa["spec"]["minReplicas"] <= api["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    pdb = _one(objects, "PodDisruptionBudget", "paretune-api")
    assert _matches(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    if overlay == "production":
        assert pdb["spec"]["minAvailable"] >= 1 and hpa["spec"]["minReplicas"] >= 2
    assert api["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    monitor = _one(objects, "ServiceMonitor", "paretune-api")
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}


def test_scheduler(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """The steps run in paretune-scheduler, not in the API replicas: same image and database,
    its metrics port scraped through its own Service, reachable by Prometheus only there."""
    overlay, objects = rendered
    api = _one(objects, "Deployment", "paretune-api")
    (api_container,) = _containers(api)
    assert {e["name"]: e.get("value") for e in api_container["env"]}["PARETUNE_SCHEDULER_PROCESS"] == "true"
    deployment = _one(objects, "Deployment", "paretune-scheduler")
    (container,) = _containers(deployment)
    args = container["args"]
    assert args[:2] == ["paretune", "scheduler"]
    assert container["image"] == api_container["image"]
    env = {e["name"]: e for e in container["env"]}
    api_env = {e["name"]: e for e in api_container["env"]}
    assert env["PARETUNE_DATABASE_URL"] == api_env["PARETUNE_DATABASE_URL"]
    assert env["PARETUNE_REDIS_URL"] == api_env["PARETUNE_REDIS_URL"]  # wake-ups cross to it over Redis
    assert env["PARETUNE_MIGRATE_ON_START"]["value"] == "false"
    if overlay == "production":  # a study's lock lets them share the studies: one takes over at once
        assert deployment["spec"]["replicas"] >= 2
        assert _one(objects, "PodDisruptionBudget", "paretune-scheduler")["spec"]["minAvailable"] >= 1
    port = int(args[args.index("--metrics-port") + 1])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == port and container["livenessProbe"]["tcpSocket"]["port"] == "metrics"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = _one(objects, "Service", "paretune-scheduler")
    assert _matches(service["spec"]["selector"], pod_labels)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]
    monitor = _one(objects, "ServiceMonitor", "paretune-scheduler")
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert not _matches(_one(objects, "ServiceMonitor", "paretune-api")["spec"]["selector"]["matchLabels"],
                        service["metadata"]["labels"])
    policy = _one(objects, "NetworkPolicy", "paretune-scheduler")
    assert _matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [port]
    assert _matches(_one(objects, "PodDisruptionBudget", "paretune-scheduler")["spec"]["selector"]["matchLabels"],
                    pod_labels)
    alerts = [r for g in _one(objects, "PrometheusRule", "paretune")["spec"]["groups"] for r in g["rules"]]
    assert any('job="paretune-scheduler"' in r["expr"] for r in alerts)


def test_the_postgres_connections_it_needs_are_stated(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """The HPA states the most connections the deployment opens, from the replicas (at the
    HPA's maximum and a rollout's surge), their pool sizes and the overflow the code allows."""
    _, objects = rendered

    def most_pods(deployment: dict[str, Any], replicas: int) -> int:
        return replicas + int(deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"])

    def pool(container: dict[str, Any], default: int) -> int:
        env = {e["name"]: e.get("value") for e in container["env"]}
        return int(env.get("PARETUNE_DB_POOL_SIZE") or default)

    api = _one(objects, "Deployment", "paretune-api")
    scheduler = _one(objects, "Deployment", "paretune-scheduler")
    hpa = _one(objects, "HorizontalPodAutoscaler", "paretune-api")
    (api_container,) = _containers(api)
    (scheduler_container,) = _containers(scheduler)
    settings_default = Settings.model_fields["db_pool_size"].default
    per_api = pool(api_container, settings_default) + MAX_OVERFLOW
    per_scheduler = min(pool(scheduler_container, settings_default), SCHEDULER_POOL) + MAX_OVERFLOW
    needed = (most_pods(api, hpa["spec"]["maxReplicas"]) * per_api
              + most_pods(scheduler, scheduler["spec"]["replicas"]) * per_scheduler + 1)  # + the migration
    assert int(hpa["metadata"]["annotations"]["paretune.dev/postgres-connections"]) == needed


def test_migration_job(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    job = _one(objects, "Job", "paretune-migrate")
    (container,) = _containers(job)
    assert container["args"] == ["paretune", "db", "upgrade"]
    api = _one(objects, "Deployment", "paretune-api")
    assert container["image"] == _containers(api)[0]["image"], "the job migrates with the release it precedes"
    assert _secret_refs(job["spec"]["template"]["spec"]) == {
        e["valueFrom"]["secretKeyRef"]["name"] for e in _containers(api)[0]["env"]
        if e["name"] == "PARETUNE_DATABASE_URL"}
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "migrate"


def test_gpu_workers(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    workers = [o for o in objects if o["kind"] == "Deployment"
               and _containers(o)[0].get("args", [])[:2] == ["paretune", "worker"]]
    assert workers
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        args = container["args"]
        pool = args[args.index("--pool") + 1]
        assert deployment["spec"]["template"]["metadata"]["labels"]["paretune.dev/pool"] == pool
        resources = container["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 1 and resources["requests"] == resources["limits"]
        assert spec.get("nodeSelector") or spec.get("affinity"), "a pool's pods run on that pool's nodes"
        assert spec["terminationGracePeriodSeconds"] >= DRAIN_S + 60, "SIGKILL must not cut the drain short"
        token_file = Path(args[args.index("--token-file") + 1])
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        (volume,) = [v for v in spec["volumes"] if "secret" in v and mounts[v["name"]]["mountPath"] ==
                     str(token_file.parent)]
        assert [i["path"] for i in volume["secret"]["items"]] == [token_file.name]
        assert mounts[volume["name"]]["readOnly"] is True
        assert "env" not in container or not any("DATABASE" in e["name"] for e in container["env"])
        assert spec["automountServiceAccountToken"] is False
    policy = _one(objects, "NetworkPolicy", "paretune-worker")
    api_labels = _one(objects, "Deployment", "paretune-api")["spec"]["template"]["metadata"]["labels"]
    allowed = [rule for rule in policy["spec"]["egress"] if "to" in rule]
    assert allowed and all(_matches(peer["podSelector"]["matchLabels"], api_labels)
                           for rule in allowed for peer in rule["to"])
    assert all(p["port"] == 53 for rule in policy["spec"]["egress"] if "to" not in rule for p in rule["ports"])
    assert "ingress" not in policy["spec"]


def test_secrets(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objects = rendered
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    if overlay == "production":
        assert not secrets, "production secrets come from the cluster's secret store, not the repository"
    for name, secret in secrets.items():
        assert not secret.get("stringData"), name
    committed = [p for p in KUSTOMIZE.rglob("*.yaml") for doc in yaml.safe_load_all(p.read_text())
                 if doc and doc.get("kind") == "Secret"]
    assert not committed, f"Secret manifests committed: {committed}"
    referenced = set().union(*(_secret_refs(o["spec"]["template"]["spec"]) for o in objects
                               if o["kind"] in ("Deployment", "Job")))
    generated = {n for n in secrets}
    # generated secrets are referenced under their hashed names; the rest are made by hand
    # (docs/operations.md names them)
    by_hand = referenced - generated
    assert by_hand <= {"paretune", "paretune-worker-h200"}, by_hand
    text = (REPO / "docs" / "operations.md").read_text()
    assert all(f"create secret generic {name}" in text for name in by_hand if overlay == "production")


def test_rules_and_dashboard_are_the_shared_files(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    alerts = yaml.safe_load((REPO / "deploy" / "monitoring" / "alerts.yml").read_text())
    assert _one(objects, "PrometheusRule", "paretune")["spec"] == alerts
    dashboard = _one(objects, "ConfigMap", "paretune-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((KUSTOMIZE / "base" / "grafana-dashboard.json").read_text())
    assert json.loads(dashboard["data"]["paretune.json"]) == shipped
