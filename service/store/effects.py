"""What a transaction's changes wake, sent once it has committed.

Each entity's transition function registers here what its move wakes: the scheduling step
of a study with results to account for, the workers long-polling a pool where work was
queued, the event streams of a study that changed. The database layer (service.store.db)
sends them when the transaction commits, so that nobody is woken before what woke them is
visible, and drops them when it rolls back. Routers register nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from service.notify import Channel

KEY = "effects"  # in Session.info


class Notifications(Protocol):
    def notify(self, *channels: str) -> None: ...

    def notify_some(self, channel: str, count: int) -> None: ...


class Steps(Protocol):
    def wake(self, *study_ids: int, urgent: bool = False) -> None: ...


class Shares(Protocol):
    def queued(self, study_ids: Iterable[int]) -> None: ...


@dataclass
class Effects:
    steps: set[int] = field(default_factory=set)  # studies whose scheduling step has work
    urgent: set[int] = field(default_factory=set)  # of them, those a worker waits for
    pools: dict[str, int | None] = field(default_factory=dict)  # pool -> work queued (None: wake every waiter)
    studies: set[int] = field(default_factory=set)  # studies that queued trials
    channels: set[str] = field(default_factory=set)  # every waiter of these is woken
    callbacks: list[Callable[[], None]] = field(default_factory=list)  # this process's own bookkeeping

    def wake_step(self, study_id: int) -> None:
        self.steps.add(study_id)

    def hurry(self) -> None:
        """A worker waits for what the steps woken so far queue: they wait out no gap
        (service.scheduling.loop)."""
        self.urgent |= self.steps

    def queued(self, pool: str, count: int | None = 1, study_id: int | None = None) -> None:
        """`count` pieces of work (of `study_id`'s trials) were queued in `pool`: as many of its
        long-polls are woken (every one when None)."""
        known = self.pools.get(pool, 0)
        self.pools[pool] = None if known is None or count is None else known + count
        if study_id is not None:
            self.studies.add(study_id)

    def notify(self, *channels: str) -> None:
        self.channels.update(channels)

    def after(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def send(self, notifier: Notifications | None, scheduler: Steps | None, shares: Shares | None = None) -> None:
        """Callbacks and this process's lease order first: a long-poll woken next may rely on
        what they note. (The `queued:` notifications tell other processes' lease orders; this
        process's handler of them marks again what is marked here, which changes nothing.)"""
        for callback in self.callbacks:
            callback()
        if shares is not None and self.studies:
            shares.queued(self.studies)
        if scheduler is not None and self.steps:
            if calm := self.steps - self.urgent:
                scheduler.wake(*sorted(calm))
            if self.urgent:
                scheduler.wake(*sorted(self.urgent), urgent=True)
        if notifier is None:
            return
        everyone = {Channel.pool(pool) for pool, count in self.pools.items() if count is None} | self.channels
        everyone |= {Channel.queued(study_id) for study_id in self.studies}  # other processes' lease orders
        for pool, count in self.pools.items():
            if count is not None:
                notifier.notify_some(Channel.pool(pool), count)
        if everyone:
            notifier.notify(*sorted(everyone))


def effects(session: Session) -> Effects:
    """What the session's open transaction wakes once it commits."""
    found: Effects | None = session.info.get(KEY)
    if found is None:
        found = session.info[KEY] = Effects()
    return found


def take(session: Session) -> Effects | None:
    """The transaction's effects, removed from the session (it committed or rolled back)."""
    found: Effects | None = session.info.pop(KEY, None)
    return found
