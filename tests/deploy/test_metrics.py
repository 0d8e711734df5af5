"""/metrics of a real service after real traffic: every metric that the alerts and the Grafana
dashboard query is exported, with the label values they select, and the values agree with
what the API says about the same trials."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from fake_worker import lease, register, run
from helpers import REPO, LiveService, create_postgres_database, drop_postgres_database, start_service, wait_for
from prometheus_client.parser import text_string_to_metric_families

ALERTS = REPO / "deploy" / "monitoring" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "kubernetes" / "base" / "grafana-dashboard.json"
PROMETHEUS_OWN = {"up"}  # series Prometheus itself writes for every scrape target
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")


def queried_expressions() -> Iterator[str]:
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            yield rule["expr"]
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            yield target["expr"].replace("$pool", ".*")
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["definition"]


def _study(pool: str, trials: int) -> dict[str, Any]:
    return {
        "name": f"metrics {pool}", "pool": pool,
        "kernel": {"backend": "python", "source": "tests.fake:objective"},
        "space": [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5},
                  {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}],
        "objectives": ["f1", "f2"], "budget": {"max_trials": trials, "max_failed_trials": 5}, "parallelism": 2,
        "limits": {"max_attempts": 1},
    }


@pytest.fixture
def live_service(tmp_path: Any) -> Iterator[LiveService]:
    """`paretune serve` on a fresh Postgres database with Redis, as deployed."""
    url = create_postgres_database()
    service = start_service(url, tmp_path, {"PARETUNE_LEASE_S": "6", "PARETUNE_HEARTBEAT_S": "1",
                                            "PARETUNE_REAPER_INTERVAL_S": "0.5",
                                            "PARETUNE_REDIS_URL": "redis://127.0.0.1:6379/0"})
    try:
        yield service
    finally:
        service.stop()
        drop_postgres_database(url)


def test_alerts_and_dashboard_query_what_metrics_exports(live_service: LiveService) -> None:
    samples, studies = _traffic_then_scrape(live_service)
    _every_queried_metric_is_exported(samples)
    _values_agree_with_the_api(samples, live_service, studies)
    assert _value(samples, "paretune_redis_up") == 1.0


def _traffic_then_scrape(live_service: LiveService) -> tuple[dict[str, list[Any]], dict[str, int]]:
    """Two studies: one in pool `default` run by a worker that loses one lease, fails one
    trial and completes the rest (reporting power); one queued in pool `h200`, which has
    no worker (the operator has set it up)."""
    admin = live_service.client()
    assert admin.put("/v1/pools/h200", json={}).status_code == 200
    default = admin.post("/v1/studies", json=_study("default", 6)).json()
    waiting = admin.post("/v1/studies", json=_study("h200", 4)).json()
    token = live_service.make_worker_token("default")
    with httpx.Client(base_url=live_service.url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as worker:
        worker_id = register(worker)
        abandoned = lease(worker, worker_id, wait_s=10)
        failing = lease(worker, worker_id, wait_s=10)
        assert abandoned and failing
        posted = worker.post(f"/v1/leases/{failing['token']}/result",
                             json={"status": "failed", "failure_reason": "compile_error", "message": "bad flag"})
        assert posted.status_code == 200, posted.text
        trial_id = abandoned["trial"]["trial_id"]
        wait_for(lambda: _trial(admin, default["id"], trial_id)["state"] == "failed", 30, "the lease to expire")
        assert run(worker, worker_id, wait_s=5) == 4
    wait_for(lambda: _accounted(admin, default["id"]) == 6, 30, "the study's step to account for every trial")
    body = admin.get("/metrics").text
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples, {"default": default["id"], "h200": waiting["id"]}


def _accounted(client: httpx.Client, study_id: int) -> int:
    progress = client.get(f"/v1/studies/{study_id}").json()["progress"]
    return int(progress["completed"] + progress["failed"] + progress["cancelled"])


def _trial(client: httpx.Client, study_id: int, trial_id: int) -> dict[str, Any]:
    items = client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000}).json()["items"]
    return next(t for t in items if t["id"] == trial_id)


def _value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    (found,) = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    return float(found)


def _every_queried_metric_is_exported(samples: dict[str, list[Any]]) -> None:
    used: set[str] = set()
    for expr in queried_expressions():
        names_here = []
        for name, matchers in SELECTOR.findall(expr):
            if not name.startswith("paretune_"):
                if matchers:
                    assert name in PROMETHEUS_OWN, f"{expr}: {name} is neither exported nor Prometheus' own"
                continue
            used.add(name)
            names_here.append(name)
            assert name in samples, f"{expr}: /metrics has no {name}"
            for label, op, value in MATCHER.findall(matchers):
                if op == "=":
                    assert any(s.labels.get(label) == value for s in samples[name]), \
                        f"{expr}: no {name} series with {label}={value!r}"
                elif op == "=~":
                    assert any(re.fullmatch(value, s.labels.get(label, "")) for s in samples[name]), \
                        f"{expr}: no {name} series with {label}=~{value!r}"
        labels_here = {label for name in names_here for s in samples[name] for label in s.labels}
        for grouping in GROUPING.findall(expr):
            for label in filter(None, (g.strip() for g in grouping.split(","))):
                assert label in labels_here, f"{expr}: groups by {label}, which its series do not carry"
    assert {"paretune_queue_depth", "paretune_lease_seconds_bucket", "paretune_trials_finished_total",
            "paretune_trial_failures_total", "paretune_power_watts"} <= used


def _values_agree_with_the_api(samples: dict[str, list[Any]], service: LiveService, studies: dict[str, int]) -> None:
    admin = service.client()
    trials = {pool: admin.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["items"]
              for pool, sid in studies.items()}
    done = trials["default"]
    for state in ("completed", "failed", "cancelled"):
        expected = sum(t["state"] == state for t in done)
        assert _value(samples, "paretune_trials_finished_total", pool="default", state=state) == expected
    assert sum(t["state"] == "completed" for t in done) == 4
    assert _value(samples, "paretune_trial_failures_total", pool="default", reason="lease expired") == 1
    assert _value(samples, "paretune_trial_failures_total", pool="default", reason="compile_error") == 1
    queued = sum(t["state"] == "queued" for t in trials["h200"])
    assert queued == 2 and _value(samples, "paretune_queue_depth", pool="h200") == queued
    assert not [s for s in samples["paretune_queue_depth"] if s.labels["pool"] == "default"]
    assert _value(samples, "paretune_workers_live", pool="default") == 1
    assert 0 <= _value(samples, "paretune_worker_last_seen_age_seconds", pool="default") < 30
    assert _value(samples, "paretune_database_up") == 1
    # power: the fake objective reports power_w = 100 + 50 x for the trial's x
    latest = max((t for t in done if t["state"] == "completed"), key=lambda t: t["finished_at"])
    (power,) = samples["paretune_power_watts"]
    assert power.labels["pool"] == "default"
    assert power.value == pytest.approx(100.0 + 50.0 * latest["config"]["x"])
    assert _value(samples, "paretune_lease_seconds_count") >= 6
    assert _value(samples, "paretune_result_seconds_count") == 5

