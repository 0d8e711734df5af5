"""The tenancy matrix, on SQLite and Postgres: every operation of the OpenAPI document x
every kind of caller x the ids of the caller's own team and of another team.

Teams alpha and beta each have a study (with trials and a live lease) in a pool of their
own, a registered worker, and tokens. Callers: alpha's viewer, member, approver, admin
and worker, beta's admin and worker, and no, an expired and a revoked token. Each call
names one team's objects (study, trial number, token, lease, worker, team name). Another
team's objects answer 403 or 404, never 2xx with data nor a 5xx, and leave the objects as
they were; the caller's own team's follow the roles. A new operation fails this test until
it is given a rule below, so none is left out."""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from artifact_steps import good_trials, promote, report
from conftest import Api, make_api, study_doc
from fake_worker import result_for

from service.controls.packs import build
from service.store.models import ControlsFile

ROLES = ("viewer", "member", "approver", "admin")
RANK = {role: i for i, role in enumerate(ROLES)}
# Who may call each operation on its own team's objects: a user role (and up), "worker"
# (worker tokens only), "operator" (superuser only), "anyone" (any valid token), "public".
# Its scope says what another team's caller gets: "ids" (the call names the target
# team's objects: 403/404), "list" (200 with the caller's own data only), "none" (names
# nothing of the target team).
RULES: dict[tuple[str, str], tuple[str, str]] = {
    ("GET", "/v1/studies"): ("viewer", "list"),
    ("POST", "/v1/studies"): ("member", "none"),
    ("GET", "/v1/studies/{study_id}"): ("viewer", "ids"),
    ("POST", "/v1/studies/{study_id}/pause"): ("member", "ids"),
    ("POST", "/v1/studies/{study_id}/resume"): ("member", "ids"),
    ("POST", "/v1/studies/{study_id}/cancel"): ("member", "ids"),
    ("GET", "/v1/studies/{study_id}/trials"): ("viewer", "ids"),
    ("GET", "/v1/studies/{study_id}/trials/{number}"): ("viewer", "ids"),
    ("GET", "/v1/studies/{study_id}/front"): ("viewer", "ids"),
    ("GET", "/v1/studies/{study_id}/points"): ("viewer", "ids"),
    ("GET", "/v1/studies/{study_id}/events"): ("viewer", "ids"),
    ("GET", "/v1/compare"): ("viewer", "ids"),  # names two studies of one team's
    ("POST", "/v1/workers/register"): ("worker", "ids"),
    ("POST", "/v1/leases"): ("worker", "ids"),
    ("POST", "/v1/leases/{token}/heartbeat"): ("worker", "ids"),
    ("POST", "/v1/leases/{token}/result"): ("worker", "ids"),
    ("GET", "/v1/workers"): ("viewer", "list"),
    ("GET", "/v1/pools"): ("anyone", "none"),  # pools are shared; their isolation requirements are public
    ("PUT", "/v1/pools/{name}"): ("operator", "none"),
    ("GET", "/v1/pools/{name}/shares"): ("anyone", "none"),  # the pool's totals, own team's row
    ("GET", "/v1/me"): ("anyone", "none"),
    ("GET", "/v1/teams"): ("viewer", "list"),
    ("POST", "/v1/teams"): ("operator", "none"),
    ("GET", "/v1/tokens"): ("admin", "list"),
    ("POST", "/v1/tokens"): ("admin", "ids"),
    ("POST", "/v1/tokens/{token_id}/rotate"): ("admin", "ids"),
    ("DELETE", "/v1/tokens/{token_id}"): ("admin", "ids"),
    ("POST", "/v1/studies/{study_id}/candidates"): ("member", "ids"),
    ("GET", "/v1/studies/{study_id}/candidates"): ("viewer", "ids"),
    ("GET", "/v1/candidates/{candidate_id}"): ("viewer", "ids"),
    ("POST", "/v1/candidates/{candidate_id}/approve"): ("approver", "ids"),
    ("POST", "/v1/candidates/{candidate_id}/reject"): ("approver", "ids"),
    ("GET", "/v1/validations/{validation_id}"): ("viewer", "ids"),
    ("POST", "/v1/leases/{token}/validation"): ("worker", "ids"),
    ("GET", "/v1/artifacts"): ("viewer", "list"),
    ("GET", "/v1/artifacts/public-key"): ("public", "none"),  # builds verify offline against it
    ("GET", "/v1/artifacts/resolve"): ("viewer", "ids"),  # names a kernel on a device of one team's
    ("GET", "/v1/artifacts/{artifact_id}"): ("viewer", "ids"),
    ("GET", "/v1/artifacts/{artifact_id}/versions/{version}"): ("viewer", "ids"),
    ("PUT", "/v1/artifacts/{artifact_id}/versions/{version}"): ("member", "ids"),  # always 409: immutable
    ("PATCH", "/v1/artifacts/{artifact_id}/versions/{version}"): ("member", "ids"),
    ("GET", "/v1/artifacts/{artifact_id}/versions/{version}/file"): ("viewer", "ids"),
    ("POST", "/v1/artifacts/{artifact_id}/rollback"): ("approver", "ids"),
    ("POST", "/v1/artifacts/{artifact_id}/versions/{version}/revoke"): ("approver", "ids"),
    ("POST", "/v1/artifacts/{artifact_id}/revalidate"): ("approver", "ids"),
    ("GET", "/v1/audit"): ("viewer", "list"),
    ("GET", "/v1/controls/catalog"): ("viewer", "none"),  # the operator's, shared by every team
    ("GET", "/v1/controls/packs"): ("viewer", "none"),
    ("POST", "/v1/controls/packs"): ("operator", "none"),
    ("GET", "/v1/controls/files/{sha}"): ("viewer", "ids"),  # an ACF a team's study generated is the team's
    ("GET", "/livez"): ("public", "none"),
    ("GET", "/healthz"): ("public", "none"),
    ("GET", "/metrics"): ("public", "none"),
}
QUERIES = {"/v1/studies/{study_id}/events": {"follow": "false"}}
STUDY_ACTIONS = ("/pause", "/resume", "/cancel")
# a state conflict is an answer of the caller's own team's objects here (an approved candidate
# approved again, an approved version edited, a baseline promoted)
CONFLICT_OK = {
    ("POST", "/v1/studies/{study_id}/candidates"),
    ("POST", "/v1/candidates/{candidate_id}/approve"),
    ("POST", "/v1/candidates/{candidate_id}/reject"),
    ("PUT", "/v1/artifacts/{artifact_id}/versions/{version}"),
    ("PATCH", "/v1/artifacts/{artifact_id}/versions/{version}"),
    ("POST", "/v1/artifacts/{artifact_id}/rollback"),
}


@dataclass
class Team:
    name: str
    pool: str
    tokens: dict[str, str]  # role (and "worker") -> secret
    token_ids: dict[str, int]
    study_id: int
    worker_id: int
    art: dict[str, Any] = field(default_factory=dict)  # its artifact study, candidate, artifact

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


@dataclass(frozen=True)
class Caller:
    name: str
    team: str | None  # None: not authenticated
    role: str  # a user role, "worker", or "none" (no, expired or revoked token)
    headers: dict[str, str]


class Matrix:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.teams = {name: self._team(name) for name in ("alpha", "beta")}
        api.quiesce()

    def _team(self, name: str) -> Team:
        api, admin = self.api, self.api.admin
        assert api.client.post("/v1/teams", json={"name": name}, headers=admin).status_code == 201
        tokens, ids = {}, {}
        for role in (*ROLES, "worker"):
            body = {"name": f"{name}-{role}", "team": name, "role": role} if role != "worker" else {
                "name": f"{name}-worker", "kind": "worker", "pool": f"{name}-pool"}
            r = api.client.post("/v1/tokens", json=body, headers=admin)
            assert r.status_code == 201, r.text
            tokens[role], ids[role] = r.json()["token"], r.json()["id"]
        team = Team(name, f"{name}-pool", tokens, ids, 0, 0)
        r = api.client.post("/v1/workers/register", headers=team.headers("worker"),
                            json={"name": f"{name}-w", "pool": team.pool, "fingerprint": {"backends": ["python"]}})
        assert r.status_code == 201, r.text
        team.worker_id = r.json()["worker_id"]
        team.art = self._artifact(team)
        team.study_id = self.new_study(team)
        return team

    def _artifact(self, team: Team) -> dict[str, Any]:
        """An approved artifact of the team: a small study of its pool run to its end by its
        worker, a candidate validated by it (scripted), on a device of the team's own so that
        a resolve names one team's."""
        api, worker = self.api, self.worker(team)
        r = api.client.post("/v1/studies", headers=team.headers("admin"),
                            json=study_doc(pool=team.pool, budget={"max_trials": 6}, parallelism=2))
        study_id = int(r.json()["id"])
        api.quiesce()
        api.run_worker(worker, result_for)
        number = good_trials(api, study_id, team.headers("viewer"))[0]["number"]
        art = {"study_id": study_id, "device": self.target(team)["cpu"], "number": number}
        candidate = promote(api, team.tokens["member"], study_id, [number]).json()["candidates"][0]
        self.report_validations(team)
        r = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=team.headers("approver"))
        assert r.status_code == 201, r.text
        art.update(candidate_id=candidate["id"], validation_id=candidate["validation_id"],
                   artifact_id=r.json()["artifact_id"], acf=self._engine_file(study_id))
        return art

    def _engine_file(self, study_id: int) -> str:
        """An ACF as CompileIQ's engine stores one for the study (the engine itself is
        tests/service/test_compileiq_sampler.py's)."""
        content = f"controls of study {study_id}".encode()
        sha = hashlib.sha256(content).hexdigest()
        with self.api.client.app.state.paretune.db.write() as session:  # type: ignore[attr-defined]
            session.add(ControlsFile(sha256=sha, content=content, size_bytes=len(content), compiler="ptxas",
                                     version="13.3", origin="engine", study_id=study_id))
        return sha

    def worker(self, team: Team) -> tuple[dict[str, str], int]:
        return team.headers("worker"), team.worker_id

    def target(self, team: Team) -> dict[str, str]:
        return {"cpu": f"{team.name} CPU", "machine": "x86_64", "cc": "gcc 12.2.0"}

    def report_validations(self, team: Team) -> str | None:
        """Report the queued validation jobs of the team's pool (they are leased first); the
        token of the first trial leased after them, if any."""
        while True:
            held = self.api.lease(self.worker(team))
            if held is None or held.get("trial"):
                return None if held is None else str(held["token"])
            body = report(held["validation"], {c["candidate_id"]: 0.9 for c in held["validation"]["candidates"]},
                          target=self.target(team))
            r = self.api.client.post(f"/v1/leases/{held['token']}/validation", json=body,
                                     headers=team.headers("worker"))
            assert r.status_code == 200, r.text

    def fresh_version(self, team: Team) -> int:
        """A new current version of the team's artifact (the one before it superseded)."""
        api, art = self.api, team.art
        candidate = promote(api, team.tokens["member"], art["study_id"], [art["number"]]).json()["candidates"][0]
        leased = self.report_validations(team)
        if leased is not None:  # a trial of the team's study: give it back as failed
            api.post_result(self.worker(team), leased, {"status": "failed", "failure_reason": "crash"})
        r = api.client.post(f"/v1/candidates/{candidate['id']}/approve", headers=team.headers("approver"))
        assert r.status_code == 201, r.text
        return int(r.json()["version"])

    def fresh_validation_lease(self, team: Team) -> tuple[str, dict[str, Any]]:
        """A validation job that the team's worker holds now, and its spec."""
        api, art = self.api, team.art
        r = api.client.post(f"/v1/artifacts/{art['artifact_id']}/revalidate", json={"rounds": 2},
                            headers=team.headers("approver"))
        assert r.status_code == 201, r.text
        held = api.lease(self.worker(team))
        assert held is not None and held["validation"] is not None
        return str(held["token"]), held["validation"]

    def new_study(self, team: Team) -> int:
        r = self.api.client.post("/v1/studies", headers=team.headers("admin"), json=study_doc(
            pool=team.pool, budget={"max_trials": 10_000}, parallelism=8))
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def fresh_lease(self, team: Team) -> str:
        """A lease of a trial that the team's worker holds now (a new study when its pool ran
        dry; validation jobs queued before it are reported first)."""
        for _ in range(3):
            token = self.report_validations(team)
            if token is not None:
                return token
            self.new_study(team)
            self.api.quiesce()
        raise AssertionError(f"no trial to lease in pool {team.pool}")

    def fresh_token_id(self, team: Team) -> int:
        r = self.api.client.post("/v1/tokens", json={"name": f"target-{uuid.uuid4().hex[:6]}", "role": "viewer",
                                                     "team": team.name}, headers=self.api.admin)
        return int(r.json()["id"])

    def request(self, method: str, path: str, target: Team, caller: Caller) -> dict[str, Any]:
        """The arguments of a call of operation (method, path) naming `target`'s objects
        (a study is created in the caller's own pool: pools are shared, not a team's)."""
        art = target.art
        values: dict[str, Any] = {"study_id": target.study_id, "number": 0, "name": target.pool,
                                  "candidate_id": art["candidate_id"], "validation_id": art["validation_id"],
                                  "artifact_id": art["artifact_id"], "version": 1, "sha": art["acf"]}
        if "{token_id}" in path:
            values["token_id"] = self.fresh_token_id(target)
        spec: dict[str, Any] = {}
        if path == "/v1/leases/{token}/validation":
            values["token"], spec = self.fresh_validation_lease(target)
        elif "{token}" in path:
            values["token"] = self.fresh_lease(target)
        if path.endswith("/revoke"):  # revoke a superseded version: the artifact keeps a current one
            values["version"] = self.fresh_version(target)
            self.fresh_version(target)
        bodies: dict[str, Any] = {
            "/v1/studies": study_doc(pool=self.teams[caller.team].pool if caller.team else "default"),
            "/v1/workers/register": {"name": "m", "pool": target.pool, "fingerprint": {"backends": ["python"]}},
            "/v1/leases": {"worker_id": target.worker_id, "wait_s": 0},
            "/v1/leases/{token}/heartbeat": {"phase": "run"},
            "/v1/leases/{token}/result": {"status": "failed", "failure_reason": "crash", "message": "matrix"},
            "/v1/teams": {"name": f"t-{uuid.uuid4().hex[:8]}"},
            "/v1/tokens": {"name": "m", "role": "viewer", "team": target.name},
            "/v1/tokens/{token_id}/rotate": {"grace_s": 0},
            "/v1/pools/{name}": {"min_isolation": "none"},
            "/v1/controls/packs": build(f"pack-{uuid.uuid4().hex[:8]}", {"a.acf": b"controls"}, compiler="ptxas",
                                        version="13.3"),
            "/v1/studies/{study_id}/candidates": {"trials": [0], "note": "matrix"},
            "/v1/candidates/{candidate_id}/approve": {"why": "matrix"},
            "/v1/candidates/{candidate_id}/reject": {"why": "matrix"},
            "/v1/artifacts/{artifact_id}/versions/{version}": {"document": {}},
            "/v1/artifacts/{artifact_id}/rollback": {"version": 1, "why": "matrix"},
            "/v1/artifacts/{artifact_id}/versions/{version}/revoke": {"why": "matrix"},
            "/v1/artifacts/{artifact_id}/revalidate": {"rounds": 2},
        }
        if spec:
            bodies[path] = report(spec, {c["candidate_id"]: 0.9 for c in spec["candidates"]},
                                  target=self.target(target))
        params = QUERIES.get(path)
        if path == "/v1/artifacts/resolve":
            params = {"kernel": "zdt", "gpu": art["device"]}
        if path == "/v1/compare":  # the team's artifact study and its running study: one kernel
            params = {"studies": f"{art['study_id']},{target.study_id}"}
        body = bodies.get(path) if method != "GET" and path in bodies else None
        sent = {"content": body} if isinstance(body, bytes) else {"json": body}
        return {"method": method, "url": path.format(**values), "params": params, "path": path, **sent}

    def snapshot(self, team: Team) -> Any:
        """What a call naming `team`'s objects could change, as its admin and the operator
        see it (a study's progress is left out: the scheduler refills the queue meanwhile)."""
        get = self.api.client.get
        admin = self.api.admin
        return (get(f"/v1/studies/{team.study_id}", headers=team.headers("admin")).json()["state"],
                sorted((t["id"], t["replaced_by"]) for t in get("/v1/tokens", headers=admin).json()),
                sorted((w["id"], w["pool"]) for w in get("/v1/workers", headers=admin).json()))

    def unchanged(self, team: Team, before: Any, url: str) -> str | None:
        if self.snapshot(team) != before:
            return f"changed {team.name}'s objects"
        lease = re.match(r"^/v1/leases/([^/]+)/", url)
        if lease:  # the lease still belongs to its worker, alive
            r = self.api.client.post(f"/v1/leases/{lease.group(1)}/heartbeat", json={}, headers=team.headers("worker"))
            return None if r.status_code == 200 else f"the lease of {team.name}'s worker is gone: {r.text[:200]}"
        return None

    def foreign_ids(self, team: Team) -> set[str]:
        """Markers of `team`'s data in an answer."""
        return {f'"pool":"{team.pool}"', f'"team":"{team.name}"', f'"name":"{team.name}"', f'"name":"{team.name}-w"',
                f'"cpu":"{team.name} CPU"'}


@pytest.fixture
def matrix(database_url: str) -> Iterator[Matrix]:
    for api in make_api(database_url, auth_failure_limit=1_000_000):
        yield Matrix(api)


def callers(m: Matrix) -> list[Caller]:
    alpha, beta = m.teams["alpha"], m.teams["beta"]
    api = m.api
    expired = api.client.post("/v1/tokens", json={"name": "expired", "role": "admin", "team": "alpha",
                                                  "expires_in": 1}, headers=api.admin).json()["token"]
    revoked = api.client.post("/v1/tokens", json={"name": "revoked", "role": "admin", "team": "alpha"},
                              headers=api.admin).json()
    assert api.client.delete(f"/v1/tokens/{revoked['id']}", headers=api.admin).status_code == 204
    time.sleep(1.1)
    return [
        *(Caller(f"alpha {role}", "alpha", role, alpha.headers(role)) for role in (*ROLES, "worker")),
        Caller("beta admin", "beta", "admin", beta.headers("admin")),
        Caller("beta worker", "beta", "worker", beta.headers("worker")),
        Caller("no token", None, "none", {}),
        Caller("expired token", None, "none", {"Authorization": f"Bearer {expired}"}),
        Caller("revoked token", None, "none", {"Authorization": f"Bearer {revoked['token']}"}),
        Caller("malformed header", None, "none", {"Authorization": "Basic YWRtaW46YWRtaW4="}),
    ]


def send(api: Api, call: dict[str, Any], headers: dict[str, str], **override: Any) -> Any:
    arguments = {**{k: v for k, v in call.items() if k != "path"}, **override}
    return api.client.request(**arguments, headers=headers)


def allowed(rule: str, caller: Caller) -> bool:
    if rule == "anyone":
        return True
    if rule == "operator":
        return False
    if rule == "worker":
        return caller.role == "worker"
    return caller.role in RANK and RANK[caller.role] >= RANK[rule]


def operations(api: Api) -> list[tuple[str, str, bool]]:
    """(method, path, authenticated) of every operation the OpenAPI document lists."""
    document = api.client.get("/openapi.json").json()
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            found.append((method.upper(), path, bool(operation.get("security"))))
    return found


def test_every_operation_for_every_caller_on_both_teams_ids(matrix: Matrix) -> None:
    api = matrix.api
    found = operations(api)
    unclassified = [(m, p) for m, p, _ in found if (m, p) not in RULES]
    assert not unclassified, f"give these operations a rule in RULES: {unclassified}"
    for method, path, authenticated in found:
        assert authenticated == (RULES[(method, path)][0] != "public"), (method, path)
    problems: list[str] = []
    calls = 0
    everyone = callers(matrix)
    for caller in everyone:
        for target in matrix.teams.values():
            for method, path, _ in found:
                rule, scope = RULES[(method, path)]
                same = caller.team == target.name
                call = matrix.request(method, path, target, caller)
                before = matrix.snapshot(target) if not same and method != "GET" else None
                r = send(api, call, caller.headers)
                calls += 1
                problem = judge(matrix, caller, target, call, rule, scope, same, r)
                if before is not None and problem is None:
                    problem = matrix.unchanged(target, before, call["url"])
                if problem:
                    problems.append(f"{caller.name} -> {target.name}'s {method} {path}: {problem}")
    assert calls == len(found) * len(matrix.teams) * len(everyone)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


def judge(m: Matrix, caller: Caller, target: Team, call: dict[str, Any], rule: str, scope: str, same: bool,
          r: Any) -> str | None:
    """Why answer `r` to `call` is wrong, or None."""
    method, path = call["method"], call["path"]
    status = r.status_code
    if status >= 500:
        return f"{status} {r.text[:200]}"
    if status >= 400 and "error" not in r.json():
        return f"{status} not in the error shape: {r.text[:200]}"
    if rule == "public":
        return None if status == 200 else f"{status} for a public endpoint"
    if caller.role == "none":
        return None if status == 401 else f"{status}, expected 401: {r.text[:200]}"
    if not same and scope == "ids" and not path.startswith("/v1/leases/{token}"):
        return None if status in (403, 404) else f"{status}, expected 403 or 404: {r.text[:200]}"
    if not allowed(rule, caller):
        return None if status == 403 else f"{status}, expected 403 (role {caller.role}): {r.text[:200]}"
    if same or scope == "none":
        ok = status < 300 or (status == 409 and (path.endswith(STUDY_ACTIONS) or (method, path) in CONFLICT_OK))
        if scope == "none" and method == "POST" and path == "/v1/studies" and ok:
            mine = m.api.client.get(f"/v1/studies/{r.json()['id']}", headers=caller.headers)
            return None if mine.status_code == 200 else "created a study its own team cannot see"
        return None if ok else f"{status}, expected success: {r.text[:200]}"
    if scope == "list":
        if status != 200:
            return f"{status}, expected 200 with the caller's own data"
        leaked = [marker for marker in m.foreign_ids(target) if marker in r.text.replace(" ", "")]
        return f"shows {target.name}'s data: {leaked}" if leaked else None
    # another team's lease: indistinguishable from an unknown one, which the worker protocol
    # answers with 409 (drop the trial)
    unknown = send(m.api, call, caller.headers,
                   url=re.sub(r"^/v1/leases/[^/]+/", "/v1/leases/no-such-lease/", call["url"]))
    if status in (403, 404, 409) and status == unknown.status_code:
        return None
    return f"{status} (an unknown lease: {unknown.status_code}): {r.text[:200]}"
