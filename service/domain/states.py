"""The states of trials and studies and the changes allowed between them. No I/O: the
functions that apply a change to a row (and bump its sequence number, which is what event
streams and sampler mirrors follow) live in service.trials.transitions and
service.studies.lifecycle, and both check here first.
"""

from __future__ import annotations

from enum import StrEnum


class TrialState(StrEnum):
    QUEUED = "queued"  # ready for a worker of its pool
    PAUSED = "paused"  # waiting while its study is paused
    RUNNING = "running"  # leased to a worker
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StudyState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


TRIAL_FINISHED = frozenset({TrialState.COMPLETED, TrialState.FAILED, TrialState.CANCELLED})
TRIAL_WAITING = frozenset({TrialState.QUEUED, TrialState.PAUSED})
STUDY_FINISHED = frozenset({StudyState.COMPLETED, StudyState.CANCELLED, StudyState.FAILED})

TRIAL_TRANSITIONS: dict[TrialState, frozenset[TrialState]] = {
    TrialState.QUEUED: frozenset({TrialState.RUNNING, TrialState.PAUSED, TrialState.CANCELLED}),
    TrialState.PAUSED: frozenset({TrialState.QUEUED, TrialState.CANCELLED}),
    # a lease that expires hands the trial back (queued, or paused with its study), fails it
    # after its last attempt, or cancels it when its study has finished meanwhile
    TrialState.RUNNING: frozenset(
        {TrialState.COMPLETED, TrialState.FAILED, TrialState.QUEUED, TrialState.PAUSED, TrialState.CANCELLED}
    ),
    TrialState.COMPLETED: frozenset(),
    TrialState.FAILED: frozenset(),
    TrialState.CANCELLED: frozenset(),
}

STUDY_TRANSITIONS: dict[StudyState, frozenset[StudyState]] = {
    StudyState.RUNNING: frozenset({StudyState.PAUSED, StudyState.COMPLETED, StudyState.CANCELLED, StudyState.FAILED}),
    StudyState.PAUSED: frozenset({StudyState.RUNNING, StudyState.COMPLETED, StudyState.CANCELLED, StudyState.FAILED}),
    StudyState.COMPLETED: frozenset(),
    StudyState.CANCELLED: frozenset(),
    StudyState.FAILED: frozenset(),
}


class IllegalTransition(Exception):
    def __init__(self, kind: str, old: str, new: str) -> None:
        super().__init__(f"a {kind} cannot go from {old} to {new}")
        self.old, self.new = old, new


def check_trial(old: str, new: str) -> TrialState:
    target = TrialState(new)
    if target not in TRIAL_TRANSITIONS[TrialState(old)]:
        raise IllegalTransition("trial", old, new)
    return target


def check_study(old: str, new: str) -> StudyState:
    target = StudyState(new)
    if target not in STUDY_TRANSITIONS[StudyState(old)]:
        raise IllegalTransition("study", old, new)
    return target


def after_expired_lease(attempt: int, max_attempts: int, study_state: str) -> TrialState:
    """Where a trial goes when its lease expires: failed after its last attempt, else back
    to waiting as its study is (queued, paused), or cancelled when the study has finished."""
    if attempt >= max_attempts:
        return TrialState.FAILED
    if study_state == StudyState.RUNNING:
        return TrialState.QUEUED
    if study_state == StudyState.PAUSED:
        return TrialState.PAUSED
    return TrialState.CANCELLED
