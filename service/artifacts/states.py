"""The states of candidates, validations, validation jobs and artifact versions, and the
moves allowed. No I/O: the one function that moves each is in service.artifacts.transitions.

candidate:  validating -> validated | failed          (the validation's outcome)
            validated  -> approved | rejected
            validating -> rejected                    (withdrawn before its result)
            failed     -> rejected
validation: queued -> running (its first job leased) -> completed | failed (judged once its
            last job has finished); queued -> failed (every job failed unleased)
job:        queued -> running -> completed | failed; running -> queued (lease expired, attempts left)
version:    current -> superseded (another approved) | revoked
            superseded -> current (rollback) | revoked
Nothing leaves approved, rejected, completed, failed or revoked.
"""

from __future__ import annotations

from enum import StrEnum

from service.domain.machines import StateMachine


class CandidateState(StrEnum):
    VALIDATING = "validating"
    VALIDATED = "validated"  # correct, compared with the baseline: an approver may approve it
    FAILED = "failed"  # wrong on a shape, or not measurable: cannot be approved
    APPROVED = "approved"
    REJECTED = "rejected"


class ValidationState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class VersionState(StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


CANDIDATE = StateMachine("candidate", CandidateState, CandidateState.VALIDATING, {
    CandidateState.VALIDATING: frozenset({CandidateState.VALIDATED, CandidateState.FAILED, CandidateState.REJECTED}),
    CandidateState.VALIDATED: frozenset({CandidateState.APPROVED, CandidateState.REJECTED}),
    CandidateState.FAILED: frozenset({CandidateState.REJECTED}),
})
VALIDATION = StateMachine("validation", ValidationState, ValidationState.QUEUED, {
    ValidationState.QUEUED: frozenset({ValidationState.RUNNING, ValidationState.FAILED}),
    ValidationState.RUNNING: frozenset({ValidationState.COMPLETED, ValidationState.FAILED}),
})
JOB = StateMachine("validation job", JobState, JobState.QUEUED, {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.COMPLETED, JobState.FAILED, JobState.QUEUED}),
})
VERSION = StateMachine("artifact version", VersionState, VersionState.CURRENT, {
    VersionState.CURRENT: frozenset({VersionState.SUPERSEDED, VersionState.REVOKED}),
    VersionState.SUPERSEDED: frozenset({VersionState.CURRENT, VersionState.REVOKED}),
})
JOB_FINISHED = JOB.final
VALIDATION_FINISHED = VALIDATION.final
# the lease queue's functions (service.artifacts.validations.acquire, expire) check their
# moves of a job by this name
