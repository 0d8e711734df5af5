"""A worker that stops while it long-polls for a lease goes away without waiting for the poll
to end; the service then leases nothing to it, so no trial waits out a lease nobody holds."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import fake_worker
import httpx
from conftest import study_doc
from helpers import start_service, wait_for


def test_a_long_poll_whose_worker_went_away_is_leased_nothing(tmp_path: Path) -> None:
    service = start_service(f"sqlite:///{tmp_path / 'polls.db'}", tmp_path)
    try:
        token = service.make_worker_token()
        worker = service.client(token)
        worker_id = fake_worker.register(worker)
        address = urlsplit(service.url)
        body = json.dumps({"worker_id": worker_id, "wait_s": 30}).encode()
        poll = socket.create_connection((address.hostname, address.port))
        poll.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: paretune\r\nContent-Type: application/json\r\n"
                     + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        # the poll found the queue empty and waits
        wait_for(lambda: re.search(r"^paretune_lease_seconds_count 1\.0$", httpx.get(f"{service.url}/metrics").text,
                                   re.M), 30, service.log_path)
        poll.close()  # the worker stopped
        admin = service.client()
        study = admin.post("/v1/studies", json=study_doc(parallelism=2)).json()
        trials = f"/v1/studies/{study['id']}/trials"
        wait_for(lambda: len(admin.get(trials).json()["items"]) == 2, 30, service.log_path)
        time.sleep(1.5)  # the queued trials wake the abandoned poll at once
        assert [t["state"] for t in admin.get(trials).json()["items"]] == ["queued", "queued"]
        leased = fake_worker.lease(worker, worker_id)  # a worker that is there gets one at once
        assert leased is not None and leased["trial"]["study_id"] == study["id"]
    finally:
        service.stop()
