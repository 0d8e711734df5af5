"""Idle long-polls share what one of them learned: a queue found empty is not looked at
again until a wake-up may have gone missing (a notification that found fewer waiters than
the trials it announced) or the poll period has passed; workers that can run different
things do not share it. Validation jobs, rare beside trials, are looked for likewise."""

from __future__ import annotations

import asyncio
import time

from helpers import run_async

from service.notify import Notifier
from service.trials.empty import EmptyQueues, QueuedHint, QueueKey

GPU = QueueKey("h200", ("triton", "cuda"), True)
CPU = QueueKey("h200", ("cpu",), False)


def test_an_empty_queue_is_known_per_kind_of_worker_until_a_wakeup_is_missed_or_its_period_ends() -> None:
    queues = EmptyQueues(period_s=0.2)
    assert not queues.known_empty(GPU, 0)  # never looked
    queues.found_empty(GPU, 0)
    assert queues.known_empty(GPU, 0)
    assert not queues.known_empty(CPU, 0)  # another kind of worker of the same pool looks itself
    assert not queues.known_empty(GPU, 1)  # a notification since found too few waiters
    time.sleep(0.25)
    assert not queues.known_empty(GPU, 0)  # the period is over: other replicas may have queued


def test_a_pool_notification_is_unanswered_when_it_finds_fewer_waiters_than_trials() -> None:
    async def scenario() -> list[int]:
        notifier = Notifier(None)
        await notifier.start()
        seen = [notifier.unanswered_pool_wakeups]
        waiters = [asyncio.create_task(notifier.wait("pool:h200", 5)) for _ in range(2)]
        await asyncio.sleep(0.01)
        notifier.notify_some("pool:h200", 2)  # two trials, two waiters: answered
        assert await asyncio.gather(*waiters) == [True, True]
        seen.append(notifier.unanswered_pool_wakeups)
        waiter = asyncio.create_task(notifier.wait("pool:h200", 5))
        await asyncio.sleep(0.01)
        notifier.notify_some("pool:h200", 3)  # three trials, one waiter
        assert await waiter is True
        seen.append(notifier.unanswered_pool_wakeups)
        notifier.notify("pool:h200")  # everyone, and nobody waits
        notifier.notify("study:1")  # not a pool
        await asyncio.sleep(0.01)
        seen.append(notifier.unanswered_pool_wakeups)
        await notifier.stop()
        return seen

    assert run_async(scenario()) == [0, 0, 1, 2]


def test_validation_jobs_are_looked_for_again_once_one_is_queued_or_the_period_ends() -> None:
    hint = QueuedHint(period_s=0.2)
    assert not hint.skip(GPU)  # never looked
    hint.found_none(GPU, hint.count)
    assert hint.skip(GPU) and not hint.skip(CPU)  # per kind of worker
    before = hint.count
    hint.queued()  # a job queued here (after its commit)
    assert not hint.skip(GPU)
    hint.found_none(GPU, before)  # a look that began before the job was queued may have missed it
    assert not hint.skip(GPU)
    hint.found_none(GPU, hint.count)
    assert hint.skip(GPU)
    time.sleep(0.25)
    assert not hint.skip(GPU)  # the period is over: another replica may have queued one
