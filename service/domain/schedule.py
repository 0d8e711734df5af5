"""Scheduling rules, with no I/O: how many new trials a study's scheduling step asks for,
and when a study is finished. service.scheduling.step applies them under the study's lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.domain.states import StudyState


@dataclass(frozen=True)
class Counts:
    """A study's state and counts as its scheduling step sees them (finished trials are
    counted once the step has accounted for them)."""

    state: str
    created: int
    completed: int
    failed: int
    cancelled: int
    running: int  # trials leased to workers now
    max_trials: int
    max_failed: int
    parallelism: int
    past_wall_time: bool = False
    screened_out: int = 0

    @property
    def active(self) -> int:
        """Trials created and not yet finished: waiting (queued, paused, screened) or running."""
        return self.created - self.completed - self.failed - self.cancelled - self.screened_out

    @property
    def waiting(self) -> int:
        return self.active - self.running


def asks_wanted(counts: Counts, batch: int) -> int:
    """New trials to queue now: up to `parallelism` in flight, within the budget, at most
    `batch` in one step (a step is one short transaction; the next step asks for the rest)."""
    if counts.state != StudyState.RUNNING or counts.past_wall_time:
        return 0
    return max(0, min(counts.parallelism - counts.active, counts.max_trials - counts.created, batch))


@dataclass(frozen=True)
class Settlement:
    """A study has reached an end: its waiting trials are cancelled; it takes `state` now
    when `finish_now`, else once its running trials have reported."""

    state: StudyState
    reason: str
    finish_now: bool


def settle(counts: Counts, finish_reason: str | None = None) -> Settlement | None:
    """Whether the study ends: too many failures (failed at once), its wall time is over, or
    its budget is spent with nothing in flight (completed)."""
    if counts.state not in (StudyState.RUNNING, StudyState.PAUSED):
        return None
    if counts.failed > counts.max_failed:
        reason = f"too many failed trials ({counts.failed} > {counts.max_failed})"
        return Settlement(StudyState.FAILED, reason, finish_now=True)
    if counts.past_wall_time:
        return Settlement(StudyState.COMPLETED, "wall time limit reached", finish_now=counts.running == 0)
    if counts.created >= counts.max_trials and counts.active == 0:
        return Settlement(StudyState.COMPLETED, finish_reason or "budget spent", finish_now=True)
    return None
