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
    # failed because their configuration cannot launch (among `failed`), and how many of the
    # latest trials in a row did; whether they count against max_trials, and the caps
    infeasible: int = 0
    infeasible_in_a_row: int = 0
    count_infeasible: bool = True
    max_infeasible: int | None = None
    max_infeasible_in_a_row: int | None = None

    @property
    def active(self) -> int:
        """Trials created and not yet finished: waiting (queued, paused, screened) or running."""
        return self.created - self.completed - self.failed - self.cancelled - self.screened_out

    @property
    def spent(self) -> int:
        """Trials that count against max_trials."""
        return self.created if self.count_infeasible else self.created - self.infeasible

    @property
    def budget_left(self) -> int:
        return max(0, self.max_trials - self.spent)

    @property
    def waiting(self) -> int:
        return self.active - self.running


def asks_wanted(counts: Counts, batch: int) -> int:
    """New trials to queue now: up to `parallelism` in flight, within the budget, at most
    `batch` in one step (a step is one short transaction; the next step asks for the rest)."""
    if counts.state != StudyState.RUNNING or counts.past_wall_time:
        return 0
    return max(0, min(counts.parallelism - counts.active, counts.budget_left, batch))


@dataclass(frozen=True)
class Settlement:
    """A study has reached an end: its waiting trials are cancelled; it takes `state` now
    when `finish_now`, else once its running trials have reported."""

    state: StudyState
    reason: str
    finish_now: bool


def settle(counts: Counts, finish_reason: str | None = None) -> Settlement | None:
    """Whether the study ends: too many failures or configurations that cannot launch
    (failed at once), its wall time is over, or its budget is spent with nothing in flight
    (completed). Infeasible trials have their own caps, not max_failed's."""
    if counts.state not in (StudyState.RUNNING, StudyState.PAUSED):
        return None
    failed = counts.failed - counts.infeasible
    if failed > counts.max_failed:
        reason = f"too many failed trials ({failed} > {counts.max_failed})"
        return Settlement(StudyState.FAILED, reason, finish_now=True)
    infeasible = infeasible_settlement(counts)
    if infeasible is not None:
        return infeasible
    if counts.past_wall_time:
        return Settlement(StudyState.COMPLETED, "wall time limit reached", finish_now=counts.running == 0)
    if counts.spent >= counts.max_trials and counts.active == 0:
        return Settlement(StudyState.COMPLETED, finish_reason or "budget spent", finish_now=True)
    return None


def infeasible_settlement(counts: Counts) -> Settlement | None:
    """The study fails once its sampler has proposed too many configurations that cannot
    launch, in all or in a row: it is not finding the ones that can (the search space is
    mostly over the target's limits, or the limits are not the ones the space was made for)."""
    if counts.max_infeasible is not None and counts.infeasible > counts.max_infeasible:
        return Settlement(StudyState.FAILED, (
            f"too many configurations that cannot launch on the target ({counts.infeasible} > "
            f"budget.max_infeasible {counts.max_infeasible}); narrow the search space"), finish_now=True)
    if counts.max_infeasible_in_a_row is not None and counts.infeasible_in_a_row >= counts.max_infeasible_in_a_row:
        return Settlement(StudyState.FAILED, (
            f"{counts.infeasible_in_a_row} configurations in a row cannot launch on the target "
            f"(budget.max_infeasible_in_a_row); narrow the search space"), finish_now=True)
    return None
