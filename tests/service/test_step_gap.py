"""A study's scheduling steps start at least `step_gap_s` apart, so that the results which
arrive in between are told in one step; a result whose worker found no next lease to take
with it hurries its step past the gap, on SQLite and Postgres."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import Api, make_api, study_doc
from fake_worker import result_for

from service.notify import Channel

GAP_S = 3.0


@pytest.fixture
def gapped(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, step_gap_s=GAP_S)


def test_a_step_waits_out_the_gap_unless_a_worker_waits_for_it(gapped: Api) -> None:
    api = gapped
    headers, worker_id = api.worker()
    doc = study_doc(parallelism=1, budget={"max_trials": 10})
    assert api.client.post("/v1/studies", json=doc, headers=api.admin).status_code == 201

    def lease(wait_s: float) -> dict | None:
        r = api.client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": wait_s}, headers=headers)
        assert r.status_code in (200, 204), r.text
        return r.json() if r.status_code == 200 else None

    def report(held: dict, next_lease: bool) -> dict:
        body = result_for(held["trial"]) | {"next_lease": next_lease}
        r = api.client.post(f"/v1/leases/{held['token']}/result", json=body, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

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


def test_urgency_crosses_to_a_scheduler_process_in_the_channel_name() -> None:
    assert Channel.step_study(Channel.step(7)) == (7, False)
    assert Channel.step_study(Channel.step(7, urgent=True)) == (7, True)
    assert Channel.step(7, urgent=True).startswith(Channel.STEP)  # what the scheduler process follows
