"""A study's scheduling steps start at least `step_gap_s` apart, so that the results which
arrive in between are told in one step; a result hurries its step past the gap when its
worker found no next lease to take with it, or when another worker long-polls the pool
meanwhile, on SQLite and Postgres."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from conftest import Api, make_api, study_doc
from fake_worker import result_for
from helpers import wait_for

from service.notify import Channel

GAP_S = 5.0


@pytest.fixture
def gapped(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, step_gap_s=GAP_S)


class Worker:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.headers, self.id = api.worker()

    def lease(self, wait_s: float) -> dict | None:
        r = self.api.client.post("/v1/leases", json={"worker_id": self.id, "wait_s": wait_s}, headers=self.headers)
        assert r.status_code in (200, 204), r.text
        return r.json() if r.status_code == 200 else None

    def report(self, held: dict, next_lease: bool) -> dict:
        body = result_for(held["trial"]) | {"next_lease": next_lease}
        r = self.api.client.post(f"/v1/leases/{held['token']}/result", json=body, headers=self.headers)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


def start_study(api: Api) -> None:
    doc = study_doc(parallelism=1, budget={"max_trials": 10})
    assert api.client.post("/v1/studies", json=doc, headers=api.admin).status_code == 201


def test_a_step_waits_out_the_gap_unless_a_worker_waits_for_it(gapped: Api) -> None:
    worker = Worker(gapped)
    lease, report = worker.lease, worker.report
    start_study(gapped)
    first = lease(5)
    assert first is not None
    started = time.monotonic()  # within the gap of the step that queued the first trial
    assert report(first, next_lease=True)["next_lease"] is None  # parallelism 1: nothing else is queued
    second = lease(GAP_S / 2)  # the worker waits: the report's step did not wait out the gap
    assert second is not None and second["trial"]["number"] == 1

    report(second, next_lease=False)  # a worker of another release, or one that still holds work
    assert lease(0.5) is None  # that report's step waits out the gap
    third = lease(GAP_S + 5)
    assert third is not None and third["trial"]["number"] == 2
    assert time.monotonic() - started >= GAP_S  # after the gap that began with the second trial's step


def test_a_worker_long_polling_the_pool_hurries_another_workers_report(gapped: Api) -> None:
    reporter, poller = Worker(gapped), Worker(gapped)
    start_study(gapped)
    first = reporter.lease(5)
    assert first is not None
    got: dict = {}

    def poll() -> None:
        got["lease"] = poller.lease(2 * GAP_S)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=poll)
    thread.start()
    notifier = gapped.client.app.state.paretune.notifier  # type: ignore[attr-defined]
    wait_for(lambda: notifier.waiting(Channel.pool("default")), 10, "the poller to wait on the pool")
    reported = time.monotonic()
    reporter.report(first, next_lease=False)  # found no trial to take, and did not ask
    thread.join(3 * GAP_S)
    assert got["lease"] is not None and got["lease"]["trial"]["number"] == 1
    assert got["at"] - reported < GAP_S / 2  # not held to the gap of the step that queued trial 0


def test_urgency_crosses_to_a_scheduler_process_in_the_channel_name() -> None:
    assert Channel.step_study(Channel.step(7)) == (7, False)
    assert Channel.step_study(Channel.step(7, urgent=True)) == (7, True)
    assert Channel.step(7, urgent=True).startswith(Channel.STEP)  # what the scheduler process follows
