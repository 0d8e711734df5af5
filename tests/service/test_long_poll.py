"""A worker that stops while it long-polls for a lease goes away without waiting for the poll
to end; the service then leases nothing to it, so no trial waits out a lease nobody holds:
neither to a poll that looked at the queue before it waited nor to one that waited at once
because the queue was known to be empty."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import fake_worker
import httpx
import pytest
from conftest import study_doc
from helpers import start_service, wait_for


def raw_poll(url: str, token: str, worker_id: int) -> socket.socket:
    """A lease long-poll of 30 s whose answer nobody reads."""
    address = urlsplit(url)
    body = json.dumps({"worker_id": worker_id, "wait_s": 30}).encode()
    poll = socket.create_connection((address.hostname, address.port))
    poll.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: paretune\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return poll


def looks(url: str) -> int:
    """How many times long-polls have looked at the queue."""
    found = re.search(r"^paretune_lease_seconds_count (\d+)\.0$", httpx.get(f"{url}/metrics").text, re.M)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize("known_empty", [False, True], ids=["looked-first", "waited-at-once"])
def test_a_long_poll_whose_worker_went_away_is_leased_nothing(tmp_path: Path, known_empty: bool) -> None:
    # a period longer than the test, so that an empty look stays known
    service = start_service(f"sqlite:///{tmp_path / 'polls.db'}", tmp_path, {"PARETUNE_POLL_INTERVAL_S": "60"})
    try:
        token = service.make_worker_token()
        worker = service.client(token)
        worker_id = fake_worker.register(worker)
        if known_empty:  # a poll that looked and found nothing, so the next one waits without looking
            assert fake_worker.lease(worker, worker_id, wait_s=0.2) is None
            assert looks(service.url) == 1
        poll = raw_poll(service.url, token, worker_id)
        time.sleep(0.5)
        # the poll waits: after looking at the queue once, or at once when it was known empty
        wait_for(lambda: looks(service.url) == 1, 30, service.log_path)
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
