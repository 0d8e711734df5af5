"""Backoff and the HTTP client's retries, against a real local HTTP server."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wire.contract import HeartbeatRequest, LeaseRequest, ResultAck, TrialResult
from workers.client import ApiError, Backoff, ControlPlaneClient, GaveUp, LeaseGone


def test_backoff_grows_exponentially_with_full_jitter_and_a_cap():
    backoff = Backoff(base_s=0.5, cap_s=8.0, rng=random.Random(1))
    assert [backoff.ceiling(a) for a in range(6)] == [0.5, 1, 2, 4, 8, 8]
    delays = [backoff.next_delay() for _ in range(200)]
    for attempt, delay in enumerate(delays):
        assert 0 <= delay <= backoff.ceiling(attempt)
    late = delays[10:]
    assert max(late) > 6 and min(late) < 2  # jitter spreads over the whole window
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_backoff_does_not_overflow():
    assert Backoff(base_s=1, cap_s=30).ceiling(10_000) == 30


class Scripted:
    """Answers each path from a list of (status, body), then repeats the last."""

    def __init__(self, script: dict[str, list[tuple[int, dict | None]]]) -> None:
        self.script = script
        self.calls: list[str] = []
        plane = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                plane.calls.append(self.path)
                steps = plane.script[self.path]
                status, body = steps.pop(0) if len(steps) > 1 else steps[0]
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted():
    servers = []

    def make(script):
        server = Scripted(script)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def _client(url: str, **kw) -> ControlPlaneClient:
    return ControlPlaneClient(url, "t", backoff_base_s=0.01, backoff_cap_s=0.05, **kw)


ACK = {"trial_id": 1, "state": "completed", "duplicate": False}
DONE = TrialResult(status="completed")


def test_5xx_is_retried_until_success(scripted):
    server = scripted({"/v1/leases/tok/result": [(503, None), (502, None), (200, ACK)]})
    ack = _client(server.url).post_report("tok", DONE, ResultAck, deadline=time.monotonic() + 10)
    assert ack.trial_id == 1
    assert len(server.calls) == 3


def test_409_means_the_lease_is_gone(scripted):
    error = {"error": {"code": "lease_expired", "message": "expired", "field": None}}
    server = scripted({"/v1/leases/tok/heartbeat": [(409, error)]})
    with pytest.raises(LeaseGone, match="expired"):
        _client(server.url).heartbeat("tok", "measure", deadline=time.monotonic() + 5)


def test_result_retries_stop_at_the_lease_deadline(scripted):
    server = scripted({"/v1/leases/tok/result": [(500, None)]})
    started = time.monotonic()
    with pytest.raises(GaveUp, match="deadline"):
        _client(server.url).post_report("tok", DONE, ResultAck, deadline=time.monotonic() + 0.5)
    assert time.monotonic() - started < 2
    assert len(server.calls) > 3


def test_4xx_is_not_retried(scripted):
    error = {"error": {"code": "invalid", "message": "bad worker", "field": "worker_id"}}
    server = scripted({"/v1/leases": [(422, error)]})
    with pytest.raises(ApiError) as caught:
        _client(server.url).lease(LeaseRequest(worker_id=1, wait_s=0))
    assert caught.value.status == 422 and caught.value.field == "worker_id"
    assert len(server.calls) == 1


def test_204_is_no_lease(scripted):
    server = scripted({"/v1/leases": [(204, None)]})
    assert _client(server.url).lease(LeaseRequest(worker_id=1, wait_s=0)) is None


def test_network_errors_are_retried_until_stopped():
    stop = threading.Event()
    client = _client("http://127.0.0.1:9", stop=stop)  # nothing listens on the discard port
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(GaveUp):
        client.lease(LeaseRequest(worker_id=1, wait_s=0))
    assert 0.4 < time.monotonic() - started < 3


def test_stop_does_not_interrupt_posting_a_result_but_abort_does(scripted):
    server = scripted({"/v1/leases/tok/result": [(503, None), (503, None), (200, ACK)]})
    stop = threading.Event()
    stop.set()
    client = _client(server.url, stop=stop)
    assert client.post_report("tok", DONE, ResultAck, deadline=time.monotonic() + 10).trial_id == 1
    abort = threading.Event()
    abort.set()
    server.script["/v1/leases/tok/result"] = [(503, None)]
    with pytest.raises(GaveUp):
        _client(server.url, abort=abort).post_report(
            "tok", DONE, ResultAck, deadline=time.monotonic() + 10
        )


def test_heartbeat_body_carries_the_phase():
    assert HeartbeatRequest(phase="measure").model_dump() == {"phase": "measure"}
