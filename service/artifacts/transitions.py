"""Every change of the state of a candidate, a validation, a validation job or an artifact
version goes through its one function here, which checks the move against the entity's
machine (service.artifacts.states) first.

A candidate's every move is a verdict or a decision, recorded in the audit log with it.
Versions record no entry of their own: the artifact's action that moves them (approve,
rollback, revoke) records one on the artifact, and their moves keep the artifact's current
version in step. Nothing waits on these entities, so their moves wake nobody; a job that
goes back to the queue wakes its pool.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.artifacts import audit
from service.artifacts.states import (
    CANDIDATE,
    JOB,
    JOB_FINISHED,
    VALIDATION,
    VALIDATION_FINISHED,
    VERSION,
    CandidateState,
    JobState,
    ValidationState,
    VersionState,
)
from service.store.effects import effects
from service.store.models import Artifact, ArtifactVersion, Candidate, Validation, ValidationJob, utcnow
from service.store.storable import storable_text

AUDITED_AS = {CandidateState.VALIDATED: "validated", CandidateState.FAILED: "validation_failed",
              CandidateState.APPROVED: "approve", CandidateState.REJECTED: "reject"}


def transition_candidate(session: Session, candidate: Candidate, to: CandidateState, actor: audit.Actor,
                         why: str = "", details: dict[str, Any] | None = None, **fields: Any) -> None:
    """Move a candidate to `to` (changing `fields` with it), recorded in the audit log as
    `actor`'s, for `why`, with `details`. An approval or a rejection is `actor`'s decision."""
    target = CANDIDATE.check(candidate.state, to)
    for name, value in fields.items():
        setattr(candidate, name, value)
    candidate.state = target.value
    candidate.updated_at = utcnow()
    if target in (CandidateState.APPROVED, CandidateState.REJECTED):
        candidate.decided_by_name = actor.name
    if target == CandidateState.REJECTED:
        candidate.reason = storable_text(why)
    audit.record(session, candidate.team_id, actor, AUDITED_AS[target], "candidate", candidate.id, why,
                 **(details or {}))


def transition_validation(session: Session, validation: Validation, to: ValidationState, **fields: Any) -> None:
    """Move a validation to `to`, changing `fields` with it."""
    target = VALIDATION.check(validation.state, to)
    for name, value in fields.items():
        setattr(validation, name, value)
    validation.state = target.value
    if target in VALIDATION_FINISHED:
        validation.finished_at = utcnow()


def transition_job(session: Session, job: ValidationJob, to: JobState, **fields: Any) -> None:
    """Move a validation job to `to`, changing `fields` with it; a job queued again wakes
    its pool's workers. When it finishes, its validation may be done: the caller settles it
    (service.artifacts.validations.finish_if_done) once the move is flushed."""
    target = JOB.check(job.state, to)
    for name, value in fields.items():
        setattr(job, name, value)
    job.state = target.value
    if target in JOB_FINISHED:
        job.finished_at = utcnow()
    elif target == JobState.QUEUED:
        effects(session).queued(job.pool, None)


def transition_version(session: Session, version: ArtifactVersion, to: VersionState, artifact: Artifact) -> None:
    """Move a version of `artifact` to `to`: the artifact's current version follows."""
    target = VERSION.check(version.state, to)
    version.state = target.value
    if target == VersionState.CURRENT:
        artifact.current_version = version.version
    elif artifact.current_version == version.version:
        artifact.current_version = None
    artifact.updated_at = utcnow()
