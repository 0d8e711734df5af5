"""The states of candidates, validation jobs and artifact versions, and the changes allowed.

candidate:  validating -> validated | failed          (the validation's outcome)
            validated  -> approved | rejected
            validating -> rejected                    (withdrawn before its result)
            failed     -> rejected
job:        queued -> running -> completed | failed; running -> queued (lease expired, attempts left)
version:    current -> superseded (another approved) | revoked
            superseded -> current (rollback) | revoked
Nothing leaves approved, rejected, completed, failed or revoked.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

S = TypeVar("S", bound=StrEnum)


class CandidateState(StrEnum):
    VALIDATING = "validating"
    VALIDATED = "validated"  # correct, compared with the baseline: an approver may approve it
    FAILED = "failed"  # wrong on a shape, or not measurable: cannot be approved
    APPROVED = "approved"
    REJECTED = "rejected"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class ValidationState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class VersionState(StrEnum):
    CURRENT = "current"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


CANDIDATE_MOVES: dict[CandidateState, set[CandidateState]] = {
    CandidateState.VALIDATING: {CandidateState.VALIDATED, CandidateState.FAILED, CandidateState.REJECTED},
    CandidateState.VALIDATED: {CandidateState.APPROVED, CandidateState.REJECTED},
    CandidateState.FAILED: {CandidateState.REJECTED},
    CandidateState.APPROVED: set(),
    CandidateState.REJECTED: set(),
}
JOB_MOVES: dict[JobState, set[JobState]] = {
    JobState.QUEUED: {JobState.RUNNING, JobState.FAILED},
    JobState.RUNNING: {JobState.COMPLETED, JobState.FAILED, JobState.QUEUED},
    JobState.COMPLETED: set(),
    JobState.FAILED: set(),
}
VERSION_MOVES: dict[VersionState, set[VersionState]] = {
    VersionState.CURRENT: {VersionState.SUPERSEDED, VersionState.REVOKED},
    VersionState.SUPERSEDED: {VersionState.CURRENT, VersionState.REVOKED},
    VersionState.REVOKED: set(),
}
JOB_FINISHED = frozenset({JobState.COMPLETED, JobState.FAILED})


class IllegalMove(ValueError):
    def __init__(self, what: str, old: str, new: str, hint: str = "") -> None:
        super().__init__(f"a {what} that is {old} cannot become {new}{'; ' + hint if hint else ''}")
        self.old, self.new = old, new


def check_candidate(old: str, new: CandidateState) -> CandidateState:
    return _check("candidate", CANDIDATE_MOVES, CandidateState(old), new)


def check_job(old: str, new: JobState) -> JobState:
    return _check("validation job", JOB_MOVES, JobState(old), new)


def check_version(old: str, new: VersionState) -> VersionState:
    return _check("artifact version", VERSION_MOVES, VersionState(old), new)


def _check(what: str, moves: dict[S, set[S]], old: S, new: S) -> S:
    if new not in moves[old]:
        raise IllegalMove(what, old.value, new.value)
    return new
