"""Background tasks end when the service stops: a bounded wait passes a cancellation on even
when what it waits for completes at the same moment, and stopping cancels again a task that
carried on (on Python 3.11 asyncio.wait_for swallows such a cancellation, and a publisher
task would then wait on its empty queue forever, holding the shutdown)."""

from __future__ import annotations

import asyncio

from helpers import run_async

from service.notify import stop_tasks, within


def test_a_bounded_wait_passes_on_a_cancellation_that_arrives_as_it_completes() -> None:
    async def scenario() -> tuple[bool, bool]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        carried_on = False

        async def publisher() -> None:
            nonlocal carried_on
            await within(done, 5.0)
            carried_on = True
            await asyncio.sleep(10)

        task = asyncio.create_task(publisher())
        await asyncio.sleep(0)  # the task waits on `done`
        done.set_result(None)
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
        return task.cancelled(), carried_on

    assert run_async(scenario()) == (True, False)


def test_a_bounded_wait_times_out() -> None:
    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await within(loop.create_future(), 0.05)
        except TimeoutError:
            return loop.time() - started
        raise AssertionError("no timeout")

    assert 0.04 <= run_async(scenario()) < 1.0


def test_stopping_ends_a_task_that_swallowed_its_first_cancellation() -> None:
    async def scenario() -> tuple[bool, int, float]:
        loop = asyncio.get_running_loop()
        cancellations = 0

        async def stubborn() -> None:
            nonlocal cancellations
            while True:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancellations += 1
                    if cancellations > 1:
                        raise

        async def failing() -> None:
            raise RuntimeError("ended badly before the stop")

        tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing())]
        await asyncio.sleep(0.01)
        started = loop.time()
        async with asyncio.timeout(10):
            await stop_tasks(*tasks)
        return all(task.done() for task in tasks), cancellations, loop.time() - started

    ended, cancellations, seconds = run_async(scenario())
    assert ended and cancellations == 2 and seconds < 5
