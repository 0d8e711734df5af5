"""What a transaction's moves wake is sent once it commits, and only then: the moves register
it, the database layer sends it, and the routers wake nobody themselves."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import Api, make_api, study_doc

from service.notify import Channel
from service.store.db import Database, after_commit
from service.store.effects import effects


@dataclass
class Recorder:
    """Stands where the process's notifier and scheduler are: what reached them, in order."""

    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def notify(self, *channels: str) -> None:
        self.calls.append(("notify", *channels))

    def notify_some(self, channel: str, count: int) -> None:
        self.calls.append(("notify_some", channel, count))

    def wake(self, *study_ids: int) -> None:
        self.calls.append(("wake", *study_ids))


def test_effects_are_sent_once_committed_and_dropped_on_rollback(database_url: str) -> None:
    db = Database(database_url)
    sent = Recorder()
    db.send_effects_to(sent, sent)
    try:
        with db.write() as session:
            woken = effects(session)
            woken.queued("gpu")
            woken.queued("gpu", 2)  # trials: as many long-polls as trials
            woken.queued("cpu", None)  # every waiter of the pool
            woken.queued("cpu")
            woken.wake_step(3)
            woken.wake_step(3)
            woken.notify(Channel.study(3), Channel.STUDIES)
            after_commit(session, lambda: sent.calls.append(("callback",)))
            assert sent.calls == []  # nothing before the commit
        assert sent.calls == [("callback",), ("wake", 3), ("notify_some", "pool:gpu", 3),
                              ("notify", "pool:cpu", "studies", "study:3")]
        sent.calls.clear()
        with pytest.raises(RuntimeError), db.write() as session:
            effects(session).wake_step(4)
            raise RuntimeError("the transaction fails")
        with db.write() as session:
            effects(session).notify(Channel.study(5))
        assert sent.calls == [("notify", "study:5")]  # the rolled back transaction's wake-up is gone
    finally:
        db.dispose()


@pytest.fixture
def idle_api(database_url: str) -> Iterator[Api]:
    """No timer steps studies and no long-poll looks again by itself within a test: only
    wake-ups move anything."""
    yield from make_api(database_url, schedule_interval_s=3600.0, poll_interval_s=3600.0)


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not woken in time"
        time.sleep(0.02)


def test_study_moves_wake_steps_streams_and_long_polls(idle_api: Api) -> None:
    api = idle_api
    state = api.client.app.state.paretune  # type: ignore[attr-defined]

    def listening(channel: str) -> Future[bool]:
        """A wait on `channel` in the service's event loop, as event streams and long-polls wait."""
        waiting = api.client.portal.start_task_soon(state.notifier.wait, channel, 10.0)  # type: ignore[attr-defined]
        time.sleep(0.2)
        return waiting  # type: ignore[no-any-return]

    listed = listening(Channel.STUDIES)
    created = api.client.post("/v1/studies", json=study_doc(parallelism=2), headers=api.admin)
    assert created.status_code == 201 and listed.result(10) is True
    sid = created.json()["id"]
    trials = f"/v1/studies/{sid}/trials"
    wait_until(lambda: len(api.client.get(trials, headers=api.admin).json()["items"]) == 2)  # its step woke

    streamed = listening(Channel.study(sid))
    assert api.client.post(f"/v1/studies/{sid}/pause", headers=api.admin).json()["state"] == "paused"
    assert streamed.result(10) is True

    worker = api.worker()
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        poll = pool.submit(api.client.post, "/v1/leases", json={"worker_id": worker[1], "wait_s": 30},
                           headers=worker[0])
        time.sleep(0.5)  # the poll finds nothing (paused) and waits
        assert not poll.done()
        assert api.client.post(f"/v1/studies/{sid}/resume", headers=api.admin).json()["state"] == "running"
        leased = poll.result(10)
    assert leased.status_code == 200 and leased.json()["trial"]["study_id"] == sid
    assert time.monotonic() - started < 10  # woken by the resumed trials, long before its 30 s

