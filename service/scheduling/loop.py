"""Runs the studies' scheduling steps in the background of each control-plane replica.

A step is woken by this replica's own events (a result arrived, a study was created or
resumed, a lease expired) and by a timer that looks for studies with work in the database,
so that work left by a replica that died, or that arrived at another replica, is found
within `schedule_interval_s`. The database lock of each step makes sure that only one
replica steps a study at a time; the others skip it.

A study's steps start at least `step_gap_s` apart: a wake-up within the gap is held to its
end, so that the results which arrive meanwhile are told in one step. While trials a step
queued wait, the pause is longer, up to `step_hold_s`: half the time they would last at the
study's pace (`_pause`). A study then tells its results in batches instead of a step each,
and its queue does not run dry before the next step. An urgent wake-up (a worker waits: it
found no next lease to take with its result, or it long-polls the study's pool) is not held.

A server process may leave its steps to a scheduler process (`paretune scheduler`, which
`paretune serve` starts on Postgres): its Scheduler is not started and hands its wake-ups
to the notifier as `step:<id>` channels (`step:!<id>` when urgent), which the scheduler
process follows. Its steps then do not wait for the GIL behind the request threads.

A step wakes nobody itself: the trials it queues and the changes it makes register their
wake-ups with the step's transaction (service.store.effects), sent once it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from cachetools import TTLCache

from service.config import Settings
from service.notify import Channel, Notifier, stop_tasks
from service.scheduling.mirror import MirrorCache
from service.scheduling.step import StepReport, pending_studies, run_step
from service.store.db import STEP_THREADS, Database

log = logging.getLogger("paretune.scheduling")
RETRY_BUSY_S = 0.2  # another replica held the study's lock: look again soon
PACE_WINDOW_S = 60.0  # a study's queue is measured between steps at most this far apart


class Scheduler:
    def __init__(self, db: Database, cache: MirrorCache, notifier: Notifier, settings: Settings,
                 observe: Callable[[float], None] = lambda seconds: None) -> None:
        self.db = db
        self.cache = cache
        self.notifier = notifier
        self.interval_s = settings.schedule_interval_s
        self._pending: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # steps are mostly Python: more at once would only lengthen each one's hold of its lock
        self._slots = asyncio.Semaphore(STEP_THREADS)
        self._running: set[int] = set()
        # when each study stepped lately may step again (`_pause`); a wake-up before then waits
        # (`_held`), so that the results which arrive meanwhile are told in one step instead of
        # a step each, unless a worker waits for it (`_urgent`)
        self.gap_s, self.hold_s = settings.step_gap_s, settings.step_hold_s
        self._next_at: TTLCache[int, float] = TTLCache(maxsize=1 << 20, ttl=max(self.gap_s, self.hold_s) or 1.0)
        # each study's last step here: when it started, and the trials it left waiting
        self._last: TTLCache[int, tuple[float, int]] = TTLCache(maxsize=1 << 20, ttl=PACE_WINDOW_S)
        self._held: set[int] = set()
        self._urgent: set[int] = set()
        self.steps = 0
        self.observe = observe  # how long each step held its study's lock

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await stop_tasks(self._task)

    def wake(self, *study_ids: int, urgent: bool = False) -> None:
        """Ask for a step of these studies soon, `urgent`ly when a worker waits for what
        they queue; callable from any thread. Not started here (a scheduler process steps
        them), the wake-ups go to it through the notifier."""
        if self._loop is None:
            self.notifier.notify(*(Channel.step(study_id, urgent) for study_id in study_ids))
            return
        self._loop.call_soon_threadsafe(self._add, study_ids, urgent)

    def follow(self) -> None:
        """Step the studies other processes' `wake` names (this is the scheduler process)."""
        def woken(channel: str) -> None:
            study_id, urgent = Channel.step_study(channel)
            self._add((study_id,), urgent)

        self.notifier.on(Channel.STEP, woken)

    def _add(self, study_ids: tuple[int, ...], urgent: bool = False) -> None:
        self._pending.update(study_ids)
        if urgent:
            self._urgent.update(study_ids)
        assert self._event is not None
        self._event.set()

    async def _run(self) -> None:
        assert self._event is not None
        next_scan = 0.0
        in_flight: set[asyncio.Task[None]] = set()
        while True:
            timeout = max(0.0, next_scan - time.monotonic())
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            # that arrives as the event is set, and stop() would then wait forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._event.wait()
            self._event.clear()
            if time.monotonic() >= next_scan:
                next_scan = time.monotonic() + self.interval_s
                try:
                    self._pending.update(await self.db.run_step(self._scan))
                except Exception:
                    log.exception("looking for studies with work failed; retrying")
            ready = self._pending - self._running
            self._pending -= ready
            for study_id in sorted(ready):
                if self._hold(study_id):
                    continue
                self._running.add(study_id)
                started = time.monotonic()
                self._next_at[study_id] = started + self.gap_s
                task = asyncio.create_task(self._step(study_id, started))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)

    def _hold(self, study_id: int) -> bool:
        """Whether this study's step waits for the pause since its last one to end (it is
        then woken)."""
        if study_id in self._urgent:
            self._urgent.discard(study_id)
            self._held.discard(study_id)
            return False
        if study_id in self._held:
            return True
        wait = self._next_at.get(study_id, 0.0) - time.monotonic()
        if wait <= 0:
            return False
        self._held.add(study_id)
        assert self._loop is not None
        self._loop.call_later(wait, self._release, study_id)
        return True

    def _release(self, study_id: int) -> None:
        if study_id in self._held:  # else an urgent wake-up stepped it meanwhile
            self._held.discard(study_id)
            if not self._hold(study_id):  # unless the step that ran meanwhile paused it longer
                self._add((study_id,))

    def _pause(self, study_id: int, started: float, report: StepReport) -> float:
        """How long after this step's start the study's next may start: while trials it
        queued wait, half the time they would last, at most `hold_s`, at least the gap.

        They last as long as the study's queue takes to drain at the faster of two paces:
        the one it had since its last step here (the trials it told or, when more, that were
        leased, over the time between the two steps' starts), and the one its running trials
        would finish at if each held its lease as long as those the step accounted for. The
        second keeps a study whose trials have only begun to finish, or whose queue is
        shallow beside its trials in flight, from holding its step while they all finish. A
        study with nothing waiting, or no pace known, is not held."""
        last = self._last.get(study_id)
        self._last[study_id] = (started, report.waiting)
        paces = [report.running / report.trial_s] if report.trial_s else []
        if last is not None:
            previous, left = last
            moved = max(report.accounted, left - report.waiting_before)
            paces.append(moved / max(started - previous, 1e-3))
        pace = max(paces, default=0.0)
        if report.waiting <= 0 or pace <= 0:
            return self.gap_s
        return max(self.gap_s, min(self.hold_s, report.waiting / pace / 2))

    def _scan(self) -> list[int]:
        with self.db.read() as session:
            return pending_studies(session)

    async def _step(self, study_id: int, started: float) -> None:
        try:
            async with self._slots:
                report = await self.db.run_step(self.step_now, study_id)
        finally:
            self._running.discard(study_id)
        if report is None:  # busy elsewhere: try again shortly
            assert self._loop is not None
            self._loop.call_later(RETRY_BUSY_S, self._add, (study_id,))
            return
        pause = self._pause(study_id, started, report)
        if report.more:  # at once: it stopped for time, not for want of results
            self._next_at.pop(study_id, None)
            self._pending.add(study_id)
        else:
            self._next_at[study_id] = started + pause
        if self._pending and self._event is not None:
            self._event.set()  # wake-ups that came while this step ran

    def step_now(self, study_id: int, *, wait: bool = False) -> StepReport | None:
        """One step in its own transaction (a failed step drops the study's mirror)."""
        try:
            with self.db.write() as session:
                report = run_step(session, self.cache, study_id, wait=wait)
        except Exception:
            self.cache.drop(study_id)
            log.exception("the scheduling step of study %d failed; it will be retried", study_id)
            return StepReport(study_id, more=False)
        self.steps += 1
        if report is not None and report.locked_at:  # from the study's lock to the commit
            self.observe(time.perf_counter() - report.locked_at)
        return report
