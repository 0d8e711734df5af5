"""schemathesis over /openapi.json against a live `paretune serve`, on SQLite and Postgres:
every operation, with valid (positive) and invalid (negative) requests, authenticated as
the operator (as a worker for the worker protocol). No answer may be a 5xx; every 4xx has
the documented error shape; every 2xx matches its documented schema.

Settings: MAX_EXAMPLES requests per operation and mode, no shrinking, requests time out
after REQUEST_TIMEOUT_S, and an operation stops generating after OPERATION_BUDGET_S."""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fake_worker
import httpx
import hypothesis
import pytest
import schemathesis
from artifact_reports import report
from conftest import study_doc
from helpers import LiveService, start_service
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from service.controls.packs import build  # noqa: E402

# Booster Pack uploads: well-formed packs (of made-up bytes) and arbitrary bytes
schemathesis.openapi.media_type("application/zip", st.one_of(
    st.builds(lambda name, content: build(name, {"a.acf": content}, compiler="ptxas", version="13.3"),
              st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z"), st.binary(min_size=1, max_size=64)),
    st.binary(max_size=256)))

MAX_EXAMPLES = 25
REQUEST_TIMEOUT_S = 10.0
OPERATION_BUDGET_S = 8.0
EVENTS_TIMEOUT_S = 1.0  # a followed event stream never ends by itself
WORKER_PATHS = ("/v1/workers/register", "/v1/leases")
LIVE_POOL = "live"


@dataclass
class Target:
    service: LiveService
    admin: dict[str, str]
    worker: dict[str, str]
    live_worker: dict[str, str]
    live_worker_id: int
    protected_token_ids: set[int]
    failures: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))

    def fresh_lease(self) -> str | None:
        """The token of a lease held right now by the live worker (a study is started in
        its pool when none has a queued trial, e.g. after the fuzzer cancelled it)."""
        with httpx.Client(base_url=self.service.url, timeout=30) as client:
            for attempt in range(50):
                r = client.post("/v1/leases", json={"worker_id": self.live_worker_id, "wait_s": 0.2},
                                headers=self.live_worker)
                if r.status_code == 200:
                    return str(r.json()["token"])
                if attempt % 10 == 0:
                    client.post("/v1/studies", json=study_doc(pool=LIVE_POOL, budget={"max_trials": 100_000},
                                                              parallelism=20), headers=self.admin)
        return None


@pytest.fixture
def target(database_url: str, tmp_path: Path) -> Iterator[Target]:
    service = start_service(database_url, tmp_path, {"PARETUNE_AUTH_FAILURE_LIMIT": "1000000"})
    try:
        admin = {"Authorization": f"Bearer {service.admin_token}"}
        worker = {"Authorization": f"Bearer {service.make_worker_token()}"}
        live_worker = {"Authorization": f"Bearer {service.make_worker_token(pool=LIVE_POOL)}"}
        with httpx.Client(base_url=service.url, timeout=30) as client:
            assert client.post("/v1/studies", json=study_doc(), headers=admin).status_code == 201
            registered = [client.post("/v1/workers/register", headers=h, json={
                "name": "fuzz", "pool": pool, "fingerprint": {"backends": ["python"]}})
                for h, pool in ((worker, "default"), (live_worker, LIVE_POOL))]
            assert all(r.status_code == 201 for r in registered), [r.text for r in registered]
            approver = {"Authorization": f"Bearer {service.make_user_token('approver')}"}
            _approved_artifact(client, admin, worker, registered[0].json()["worker_id"], approver)
            ids = {t["id"] for t in client.get("/v1/tokens", headers=admin).json()}
        yield Target(service, admin, worker, live_worker, registered[1].json()["worker_id"], ids)
    finally:
        service.stop()


def _approved_artifact(client: httpx.Client, admin: dict[str, str], worker: dict[str, str], worker_id: int,
                       approver: dict[str, str]) -> None:
    """Study 1 run to its end, one of its trials promoted (candidate 1, validation 1) and
    approved (artifact 1, version 1), so that the ids the fuzzer tries first exist."""
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=client.base_url, timeout=30, headers=worker) as agent:
        while client.get("/v1/studies/1", headers=admin).json()["state"] != "completed":
            assert time.monotonic() < deadline, "study 1 did not complete"
            fake_worker.run(agent, worker_id, wait_s=0.5)
    trials = client.get("/v1/studies/1/trials", params={"state": "completed"}, headers=admin).json()["items"]
    number = next(t["number"] for t in trials if not t["is_baseline"])
    r = client.post("/v1/studies/1/candidates", json={"trials": [number], "rounds": 4}, headers=admin)
    assert r.status_code == 201, r.text
    held = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 5}, headers=worker).json()
    spec = held["validation"]
    body = report(spec, {c["candidate_id"]: 0.8 for c in spec["candidates"]})
    assert client.post(f"/v1/leases/{held['token']}/validation", json=body, headers=worker).status_code == 200
    r = client.post(f"/v1/candidates/{r.json()['candidates'][0]['id']}/approve", headers=approver)
    assert r.status_code == 201, r.text


def _check(target: Target, case: Any, response: Any, elapsed: float, label: str) -> None:
    where = f"{label}: {case.as_curl_command()[:700]}"
    status = response.status_code
    target.statuses[case.operation.label][status] += 1
    if elapsed > target.slowest[0]:
        target.slowest = (elapsed, where)
    if status >= 500:
        target.failures.append(f"{status} {response.text[:300]} from {where}")
        return
    if status >= 400:
        try:
            error = response.json()["error"]
            assert isinstance(error["code"], str) and error["code"]
            assert isinstance(error["message"], str) and error["message"]
            assert "field" in error and (error["field"] is None or isinstance(error["field"], str))
        except (ValueError, KeyError, TypeError, AssertionError):
            target.failures.append(f"{status} not in the error shape: {response.text[:300]} from {where}")
        return
    try:
        case.validate_response(response, checks=[status_code_conformance, response_schema_conformance])
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis raises a group of check failures
        target.failures.append(f"{status} does not match the schema: {str(exc)[:500]} from {where}")


def _prepare(target: Target, case: Any, live_lease: bool) -> None:
    """Keep the run bounded and the fuzzer's own tokens alive."""
    if case.path_parameters and case.path_parameters.get("token_id") in target.protected_token_ids:
        hypothesis.reject()
    body = case.body
    if case.operation.path == "/v1/leases" and isinstance(body, dict):
        wait = body.get("wait_s")
        if wait is None or isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0.05:
            body["wait_s"] = 0.05  # a long-poll for the registered worker would wait up to a minute
    if live_lease:
        token = target.fresh_lease()
        assert token is not None, "no trial could be leased for the live-lease pass"
        case.path_parameters["token"] = token


def _run(target: Target, operation: Any, mode: GenerationMode, live_lease: bool = False) -> None:
    label = f"{operation.label} [{mode.value}{', live lease' if live_lease else ''}]"
    headers = target.live_worker if live_lease else (
        target.worker if operation.path.startswith(WORKER_PATHS) else target.admin)
    timeout = EVENTS_TIMEOUT_S if operation.path.endswith("/events") else REQUEST_TIMEOUT_S
    started = time.monotonic()

    strategy = operation.as_strategy(generation_mode=mode)
    if mode == GenerationMode.POSITIVE:  # the documented examples as well (a study document's)
        strategy = st.one_of(strategy, *operation.schema.get_strategies_from_examples(operation))

    @given(case=strategy)
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        if time.monotonic() - started > OPERATION_BUDGET_S:
            hypothesis.reject()
        _prepare(target, case, live_lease)
        sent = time.monotonic()
        try:
            response = case.call(headers=headers, timeout=timeout)
        except Exception as exc:
            target.failures.append(f"no answer ({type(exc).__name__}: {exc}) from {label}: {case.as_curl_command()}")
            return
        _check(target, case, response, time.monotonic() - sent, label)

    # Unsatisfiable: nothing to negate (no parameters), or the budget ran out early
    with contextlib.suppress(hypothesis.errors.Unsatisfiable):
        fuzz()


def test_schemathesis_finds_no_5xx_and_only_documented_errors(target: Target) -> None:
    schema = schemathesis.openapi.from_url(f"{target.service.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [o.label for o in operations]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run(target, operation, mode)
        if "{token}" in operation.path:  # the same bodies on a lease that is live
            _run(target, operation, GenerationMode.POSITIVE, live_lease=True)
    for label, counts in sorted(target.statuses.items()):
        print(f"{label:45} {dict(sorted(counts.items()))}")
    # the run reached the endpoints themselves, not only the authentication in front of them
    assert not [label for label, counts in target.statuses.items() if set(counts) <= {401, 403}]
    answered = [label for label, counts in target.statuses.items() if any(200 <= s < 300 for s in counts)]
    assert len(answered) >= len(operations) * 2 // 3, answered
    log = target.service.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert not target.failures, f"{len(target.failures)} failures:\n" + "\n".join(target.failures[:20])
    assert target.slowest[0] < REQUEST_TIMEOUT_S, target.slowest
