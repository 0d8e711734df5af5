"""The wire contract version: the worker's client names it on every request, the service
refuses workers it cannot serve with a 400 naming both versions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from fake_worker import register
from helpers import LiveService

from service.workers.compat import OLDEST_WORKER_CONTRACT
from wire.contract import CONTRACT_HEADER, CONTRACT_VERSION, Fingerprint, Lease, LeaseRequest, RegisterRequest
from workers.client import ControlPlaneClient


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append((self.path, self.headers.get(CONTRACT_HEADER)))
        if self.path == "/v1/workers/register":
            body, status = {"worker_id": 1, "heartbeat_s": 5, "lease_s": 30}, 201
        else:
            body, status = None, 204
        payload = json.dumps(body).encode() if body else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_worker_client_sends_its_contract_version(recorder: str) -> None:
    client = ControlPlaneClient(recorder, "ptw_x")
    try:
        client.register(RegisterRequest(name="w", pool="default", fingerprint=Fingerprint()))
        assert client.lease(LeaseRequest(worker_id=1, wait_s=0)) is None
    finally:
        client.close()
    assert _Recorder.seen == [("/v1/workers/register", str(CONTRACT_VERSION)), ("/v1/leases", str(CONTRACT_VERSION))]


def test_the_service_serves_its_range_and_names_both_versions_otherwise(live_sqlite_service: LiveService) -> None:
    token = live_sqlite_service.make_worker_token()
    body = {"name": "w", "pool": "default", "fingerprint": {"backends": ["python"]}}
    with httpx.Client(base_url=live_sqlite_service.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert register(client) > 0  # no header: a worker of a release before the header, contract 1
        for version in range(OLDEST_WORKER_CONTRACT, CONTRACT_VERSION + 1):
            ok = client.post("/v1/workers/register", json=body, headers={CONTRACT_HEADER: str(version)})
            assert ok.status_code == 201, ok.text
        for version, advice in ((CONTRACT_VERSION + 1, "upgrade the control plane"),
                                (OLDEST_WORKER_CONTRACT - 1, "upgrade the worker")):
            refused = client.post("/v1/workers/register", json=body, headers={CONTRACT_HEADER: str(version)})
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["code"] == "incompatible_worker" and error["field"] == CONTRACT_HEADER
            assert f"wire contract {version}" in error["message"] and advice in error["message"]
            assert f"versions {OLDEST_WORKER_CONTRACT} to {CONTRACT_VERSION}" in error["message"]
            assert (error["worker_contract"], error["service_contract"]) == (version, CONTRACT_VERSION)
            lease = client.post("/v1/leases", json={"worker_id": 1, "wait_s": 0},
                                headers={CONTRACT_HEADER: str(version)})
            assert lease.status_code == 400 and lease.json()["error"]["code"] == "incompatible_worker"
        garbled = client.post("/v1/workers/register", json=body, headers={CONTRACT_HEADER: "one"})
        assert garbled.status_code == 400 and "whole number" in garbled.json()["error"]["message"]


def test_a_lease_carries_its_work_in_the_fields_of_the_workers_contract(live_sqlite_service: LiveService) -> None:
    """Contract 4 names the lease's kind and carries its `work`; a worker of contract 3 (or
    older) gets the field it knows (`trial`), in long-polls and with acknowledgements alike."""
    study = {"name": "contract", "kernel": {"backend": "python", "source": "bench:fleet"},
             "space": [{"name": "x", "type": "float", "low": 0, "high": 1, "default": 0.5}], "objectives": ["f1"],
             "budget": {"max_trials": 10}, "parallelism": 4}
    with live_sqlite_service.client() as admin:
        assert admin.post("/v1/studies", json=study).status_code == 201
    token = live_sqlite_service.make_worker_token()
    with httpx.Client(base_url=live_sqlite_service.url, headers={"Authorization": f"Bearer {token}"},
                      timeout=30) as client:
        worker_id = register(client)

        def lease(version: int) -> dict[str, object]:
            r = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 10},
                            headers={CONTRACT_HEADER: str(version)})
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        old, new = lease(3), lease(CONTRACT_VERSION)
        assert "trial" in old and "kind" not in old and "work" not in old
        assert new["kind"] == "trial" and "trial" not in new
        assert Lease.model_validate(old).trial is not None and Lease.model_validate(new).work == new["work"]
        result = {"status": "completed", "metrics": {"f1": {"value": 0.5}}, "next_lease": True}
        for held, version, field in ((old, 3, "trial"), (new, CONTRACT_VERSION, "work")):
            ack = client.post(f"/v1/leases/{held['token']}/result", json=result,
                              headers={CONTRACT_HEADER: str(version)})
            assert ack.status_code == 200, ack.text
            assert field in ack.json()["next_lease"]
            assert ack.json()["trial_id"] == (held.get("trial") or held["work"])["trial_id"]  # type: ignore[index]
