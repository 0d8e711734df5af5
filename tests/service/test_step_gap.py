"""A study's scheduling steps start at least `step_gap_s` apart, so that the results which
arrive in between are told in one step; longer, up to `step_hold_s`, while the trials its
last step left queued would last; a result hurries its step past the pause when its worker
found no next lease to take with it, or when another worker long-polls the pool meanwhile,
on SQLite and Postgres."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from conftest import Api, make_api, study_doc
from fake_worker import result_for
from helpers import wait_for

from service.notify import Channel
from service.scheduling.step import StepReport

GAP_S = 5.0
HOLD_S = 4.0


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


def start_study(api: Api, parallelism: int = 1) -> int:
    doc = study_doc(parallelism=parallelism, budget={"max_trials": 100})
    r = api.client.post("/v1/studies", json=doc, headers=api.admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]  # type: ignore[no-any-return]


def created(api: Api, study_id: int) -> int:
    r = api.client.get(f"/v1/studies/{study_id}", headers=api.admin)
    return r.json()["progress"]["created"]  # type: ignore[no-any-return]


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


@pytest.fixture
def holding(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, step_hold_s=HOLD_S)


def test_a_study_with_trials_queued_holds_its_next_step_while_they_last(holding: Api) -> None:
    worker = Worker(holding)
    study_id = start_study(holding, parallelism=10)
    first = worker.lease(5)  # its creation's step queued ten trials
    assert first is not None
    time.sleep(1.0)  # the study's pace: one result in more than a second
    worker.report(first, next_lease=False)
    # its step is not held (the gap since the creation's step is over) and refills the queue:
    # ten trials waiting, which would last ten seconds at the pace the queue drained (one
    # lease in more than a second)
    wait_for(lambda: created(holding, study_id) == 11, 10, "the step after the first result")
    refilled = time.monotonic()
    second = worker.lease(1)
    assert second is not None
    worker.report(second, next_lease=False)
    time.sleep(1.5)
    assert created(holding, study_id) == 11  # held: nine trials are still queued
    wait_for(lambda: created(holding, study_id) == 12, HOLD_S + 5, "the held step")
    assert time.monotonic() - refilled >= HOLD_S - 1.0


def test_the_pause_after_a_step_is_half_the_time_its_queue_lasts_at_its_pace(holding: Api) -> None:
    scheduler = holding.client.app.state.paretune.scheduler  # type: ignore[attr-defined]
    gap = scheduler.gap_s
    # (seconds since the study's last step here began, trials it left waiting; this step's
    # results told, trials running and waiting at its start, waiting once it is done, and how
    # long the trials it told held their leases) -> pause (by hand)
    cases = [
        (None, None, 2, 0, 6, 6, None, gap),  # no earlier step here, no lease times: no pace known
        (2.0, 10, 2, 0, 6, 6, None, 1.5),  # 4 leased in 2 s (more than told): 6 waiting last 3 s
        (2.0, 10, 6, 0, 6, 6, None, 1.0),  # 6 told in 2 s: 6 waiting last 2 s
        (2.0, 6, 0, 0, 6, 6, None, gap),  # nothing told or leased: no pace known
        (2.0, 10, 2, 0, 6, 0, None, gap),  # nothing left waiting
        (2.0, 10, 2, 8, 6, 6, None, 1.5),  # more in flight than waiting, their lease times unknown: 2 a second
        (2.0, 10, 2, 8, 6, 6, 2.0, 0.75),  # 8 running of 2 s each finish 4 a second: 6 waiting last 1.5 s
        (2.0, 10, 2, 8, 6, 6, 16.0, 1.5),  # ... of 16 s each, half a trial a second: the pace since is faster
        (None, None, 1, 200, 199, 200, 1.0, 0.5),  # the first to finish of 200: 200 waiting last 1 s
        (2.0, 110, 5, 0, 100, 100, None, HOLD_S),  # 20 s of queue: at most the hold
        (0.01, 100, 1, 0, 0, 1, None, gap),  # a fast pace: at least the gap
    ]
    for i, (since, left, told, running, before, waiting, trial_s, pause) in enumerate(cases):
        study_id = 10_000 + i
        if since is not None:
            scheduler._last[study_id] = (100.0 - since, left)
        report = StepReport(study_id, accounted=told, running=running, waiting_before=before, waiting=waiting,
                            trial_s=trial_s)
        assert scheduler._pause(study_id, 100.0, report) == pytest.approx(pause), cases[i]
