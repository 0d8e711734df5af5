"""A minimal, real HTTP control plane for driving worker agents without the service.

It implements the worker half of the protocol (register, lease long-poll, heartbeat, the
report of each kind of work) over an in-memory queue of trial specs and validation jobs, with
lease expiry and re-queueing, and it records every call so tests and benchmarks can check
what the agent did and when.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wire.contract import HeartbeatRequest, Lease, TrialResult, TrialSpec, ValidationReport, ValidationSpec

Work = TrialSpec | ValidationSpec


def work_id(spec: Work) -> int:
    """A trial's id, or a validation job's."""
    return spec.trial_id if isinstance(spec, TrialSpec) else spec.job_id


@dataclass
class Held:
    token: str
    spec: Work
    expires: float
    worker_id: int


@dataclass
class Plane:
    lease_s: float = 5.0
    heartbeat_s: float = 0.5
    token: str = "worker-secret"
    queue: list[Work] = field(default_factory=list)
    leases: dict[str, Held] = field(default_factory=dict)
    results: dict[int, TrialResult] = field(default_factory=dict)  # trial id -> first result
    validation_reports: dict[int, ValidationReport] = field(default_factory=dict)  # job id -> first report
    result_posts: list[tuple[float, int, str]] = field(default_factory=list)  # time, trial, token
    heartbeats: list[tuple[float, int, str | None]] = field(default_factory=list)
    round_beats: list[tuple[int, list[float]]] = field(default_factory=list)  # work, its round_s so far
    leased: list[tuple[float, int, int]] = field(default_factory=list)  # time, trial, attempt
    expired: list[int] = field(default_factory=list)
    registered: list[dict[str, Any]] = field(default_factory=list)
    cancel_trials: set[int] = field(default_factory=set)
    fail_result_posts: int = 0  # answer this many result posts with 503 first
    known_workers: set[int] = field(default_factory=set)  # lease answers 404 to others
    hand_next: bool = True  # a result asking for the next lease gets it with its acknowledgement
    handed: list[int] = field(default_factory=list)  # works leased that way
    cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, *specs: Work) -> None:
        with self.cond:
            self.queue.extend(specs)
            self.cond.notify_all()

    def _reap(self) -> None:
        now = time.monotonic()
        for token, held in list(self.leases.items()):
            if held.expires < now:
                del self.leases[token]
                self.expired.append(work_id(held.spec))
                self.queue.insert(0, held.spec.model_copy(update={"attempt": held.spec.attempt + 1}))
                self.cond.notify_all()

    def lease(self, worker_id: int, wait_s: float) -> Lease | None:
        deadline = time.monotonic() + wait_s
        with self.cond:
            while True:
                self._reap()
                if self.queue:
                    spec = self.queue.pop(0)
                    token = secrets.token_hex(8)
                    self.leases[token] = Held(token, spec, time.monotonic() + self.lease_s, worker_id)
                    self.leased.append((time.monotonic(), work_id(spec), spec.attempt))
                    return Lease(
                        token=token,
                        expires_at=_utc(self.lease_s),
                        lease_s=self.lease_s,
                        heartbeat_s=self.heartbeat_s,
                        kind="validation" if isinstance(spec, ValidationSpec) else "trial",
                        work=spec,
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.cond.wait(min(remaining, 0.1))

    def heartbeat(self, token: str, beat: HeartbeatRequest) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self._reap()
            held = self.leases.get(token)
            if held is None:
                return 409, _error("lease_expired", "the lease expired or is unknown")
            self.heartbeats.append((time.monotonic(), work_id(held.spec), beat.phase))
            if beat.progress is not None:
                self.round_beats.append((work_id(held.spec), beat.progress.round_s))
            held.expires = time.monotonic() + self.lease_s
            cancel = work_id(held.spec) in self.cancel_trials
            if cancel:
                del self.leases[token]
            return 200, {"expires_at": _utc(self.lease_s).isoformat(), "cancel": cancel}

    def result(self, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A report of either kind, read as the kind of its lease (as the service does)."""
        with self.cond:
            if self.fail_result_posts > 0:
                self.fail_result_posts -= 1
                return 503, _error("unavailable", "try again")
            self._reap()
            held = self.leases.pop(token, None)
            if held is None:
                return 409, _error("lease_expired", "the lease expired or is unknown")
            if isinstance(held.spec, ValidationSpec):
                job, report = held.spec, ValidationReport.model_validate(body)
                duplicate = job.job_id in self.validation_reports
                self.validation_reports.setdefault(job.job_id, report)
                ack: dict[str, Any] = {"validation_id": job.validation_id, "job_id": job.job_id}
            else:
                trial_id, result = held.spec.trial_id, TrialResult.model_validate(body)
                self.result_posts.append((time.monotonic(), trial_id, token))
                duplicate = trial_id in self.results
                self.results.setdefault(trial_id, result)
                ack = {"trial_id": trial_id}
                report = result
            self.cond.notify_all()
            ack.update(state=report.status, duplicate=duplicate)
        if self.hand_next and report.next_lease:  # as the service does: the next lease with the ack
            following = self.lease(held.worker_id, 0)
            ack["next_lease"] = following.model_dump(mode="json") if following is not None else None
            if following is not None:
                self.handed.append(work_id(following.work))  # type: ignore[arg-type]
        return 200, ack

    def wait_for_results(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.results) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(min(remaining, 0.2))
            return True


def _utc(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": None}}


def _handler(plane: Plane) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _send(self, status: int, body: dict[str, Any] | None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.headers.get("Authorization") != f"Bearer {plane.token}":
                return self._send(401, _error("unauthorized", "bad token"))
            parts = self.path.strip("/").split("/")
            if parts == ["v1", "workers", "register"]:
                plane.registered.append(body)
                worker_id = len(plane.registered)
                plane.known_workers.add(worker_id)
                return self._send(
                    201, {"worker_id": worker_id, "heartbeat_s": plane.heartbeat_s, "lease_s": plane.lease_s}
                )
            if parts == ["v1", "leases"] and body["worker_id"] not in plane.known_workers:
                error = _error("not_found", "register first")
                error["error"]["field"] = "worker_id"
                return self._send(404, error)
            if parts == ["v1", "leases"]:
                lease = plane.lease(body["worker_id"], float(body.get("wait_s", 0)))
                if lease is None:
                    return self._send(204, None)
                return self._send(200, lease.model_dump(mode="json"))
            if len(parts) == 4 and parts[:2] == ["v1", "leases"] and parts[3] == "heartbeat":
                return self._send(*plane.heartbeat(parts[2], HeartbeatRequest.model_validate(body)))
            if len(parts) == 4 and parts[:2] == ["v1", "leases"] and parts[3] == "result":
                return self._send(*plane.result(parts[2], body))
            return self._send(404, _error("not_found", self.path))

    return Handler


class PlaneServer:
    """The plane on a free port of 127.0.0.1, served from a background thread."""

    def __init__(self, plane: Plane | None = None) -> None:
        self.plane = plane or Plane()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.plane))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PlaneServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
