"""The states of trials and studies and the moves allowed between them. No I/O: the one
function that moves each (and bumps its sequence number, which is what event streams and
sampler mirrors follow) is service.trials.transitions.transition and
service.studies.lifecycle.transition, and both check here first.
"""

from __future__ import annotations

from enum import StrEnum

from service.domain.machines import StateMachine


class TrialState(StrEnum):
    QUEUED = "queued"  # ready for a worker of its pool
    PAUSED = "paused"  # waiting while its study is paused
    RUNNING = "running"  # leased to a worker
    SCREENED = "screened"  # its screening stage reported; the study's step decides what follows
    COMPLETED = "completed"
    SCREENED_OUT = "screened_out"  # its screening showed it cannot reach the front: not measured fully
    FAILED = "failed"
    CANCELLED = "cancelled"


class StudyState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


TRIAL = StateMachine("trial", TrialState, TrialState.QUEUED, {
    # failed while queued: refused in the step that created it, before any worker could see
    # it, because its configuration cannot launch on the study's target (reason infeasible)
    TrialState.QUEUED: frozenset({TrialState.RUNNING, TrialState.PAUSED, TrialState.CANCELLED, TrialState.FAILED}),
    TrialState.PAUSED: frozenset({TrialState.QUEUED, TrialState.CANCELLED}),
    # a lease that expires hands the trial back (queued, or paused with its study), fails it
    # after its last attempt, or cancels it when its study has finished meanwhile; a
    # screening stage that reports makes it screened
    TrialState.RUNNING: frozenset(
        {TrialState.COMPLETED, TrialState.SCREENED, TrialState.FAILED, TrialState.QUEUED, TrialState.PAUSED,
         TrialState.CANCELLED}
    ),
    # promoted: back to waiting for a worker, now for its full stage (paused with its study,
    # cancelled when the study has finished); or screened out
    TrialState.SCREENED: frozenset(
        {TrialState.QUEUED, TrialState.PAUSED, TrialState.CANCELLED, TrialState.SCREENED_OUT}
    ),
})

STUDY = StateMachine("study", StudyState, StudyState.RUNNING, {
    StudyState.RUNNING: frozenset({StudyState.PAUSED, StudyState.COMPLETED, StudyState.CANCELLED, StudyState.FAILED}),
    StudyState.PAUSED: frozenset({StudyState.RUNNING, StudyState.COMPLETED, StudyState.CANCELLED, StudyState.FAILED}),
})

TRIAL_FINISHED = TRIAL.final  # nothing leaves these
# waiting for a worker, or (screened) for its study's step; cancelled with their study
TRIAL_WAITING = frozenset({TrialState.QUEUED, TrialState.PAUSED, TrialState.SCREENED})
# what a study's step accounts for: finished trials, and screened ones it decides on
TRIAL_REPORTED = TRIAL_FINISHED | {TrialState.SCREENED}
STUDY_FINISHED = STUDY.final


def waiting_state(study_state: str) -> TrialState:
    """Where a trial waits for a worker: queued while its study runs, paused while it is
    paused; a study that has finished wants no more work (cancelled)."""
    if study_state == StudyState.RUNNING:
        return TrialState.QUEUED
    if study_state == StudyState.PAUSED:
        return TrialState.PAUSED
    return TrialState.CANCELLED


def after_expired_lease(attempt: int, max_attempts: int, study_state: str) -> TrialState:
    """Where a trial goes when its lease expires: failed after its last attempt, else back
    to waiting as its study is (queued, paused), or cancelled when the study has finished."""
    if attempt >= max_attempts:
        return TrialState.FAILED
    return waiting_state(study_state)
