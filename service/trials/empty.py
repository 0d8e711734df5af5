"""What a replica knows of empty queues: a long-poll does not look at a queue another
long-poll of the same kind of worker found empty until work may have come, and a rare kind of
work is not looked for until some was queued."""

from __future__ import annotations

import time
from dataclasses import dataclass

from service.workers.registry import WorkerInfo
from wire import contract as wire


@dataclass(frozen=True)
class QueueKey:
    """What a worker can lease: its pool's units of its kinds and backends (with energy
    measurement or without, on a GPU or compile-only)."""

    pool: str
    backends: tuple[str, ...]
    energy: bool
    gpu: bool = True
    kinds: tuple[str, ...] = wire.DEFAULT_KINDS

    @classmethod
    def of(cls, worker: WorkerInfo) -> QueueKey:
        return cls(worker.pool, worker.backends, worker.energy, worker.gpu, worker.kinds)


class EmptyQueues:
    """Queues this replica found empty for workers of one kind (QueueKey). A trial queued
    later wakes as many waiting long-polls of its pool as trials were queued
    (Notifier.notify_some); a long-poll whose timer runs out looks at the database again
    only when that may have missed one: a pool notification found fewer waiters than it
    announced trials (locally or through Redis) after the empty look, or that look is older
    than `period_s` (other replicas without Redis). So hundreds of idle workers of a kind
    cost one query per period, not one each, and the scheduling steps that refill the
    queue are not crowded out."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._empty: dict[QueueKey, tuple[int, float]] = {}  # -> (unanswered wake-ups then, when)

    def known_empty(self, queue: QueueKey, unanswered: int) -> bool:
        seen = self._empty.get(queue)
        return seen is not None and seen[0] == unanswered and time.monotonic() - seen[1] < self.period_s

    def found_empty(self, queue: QueueKey, unanswered_before: int) -> None:
        """Nothing for `queue` in a look that began when `unanswered_before` wake-ups had
        gone unanswered."""
        self._empty[queue] = (unanswered_before, time.monotonic())


class QueuedHint:
    """Kinds of worker for which this process recently found no queued unit of a rare kind
    of work (validation jobs beside trials).

    A lease skips looking for one for `period_s` after a look found none for its kind of
    worker, unless one was queued since: by this process, at once (`queued` runs after the
    commit that queued it and counts it, and a look is trusted only if nothing was counted
    since it began); by another replica, within the period. The same bookkeeping as the
    long-polls' `EmptyQueues`, with queued units in place of unanswered wake-ups."""

    def __init__(self, period_s: float = 1.0) -> None:
        self._empty = EmptyQueues(period_s)
        self.count = 0  # units this process has queued

    def skip(self, queue: QueueKey) -> bool:
        return self._empty.known_empty(queue, self.count)

    def found_none(self, queue: QueueKey, count_before: int) -> None:
        """None for `queue` in a look that began when `count_before` units had been queued."""
        self._empty.found_empty(queue, count_before)

    def queued(self) -> None:
        self.count += 1
