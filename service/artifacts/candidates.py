"""Candidates: completed, feasible trials promoted towards an artifact, and rejected ones."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.artifacts import audit, validations
from service.artifacts.states import CANDIDATE, CandidateState
from service.artifacts.transitions import transition_candidate
from service.domain.machines import IllegalTransition
from service.domain.states import TrialState
from service.errors import Conflict, Invalid, NotFound
from service.store.db import is_postgres
from service.store.models import Candidate, Study, Trial, Validation, utcnow
from service.store.storable import storable_text

OPEN = (CandidateState.VALIDATING.value, CandidateState.VALIDATED.value)


def promote(session: Session, study: Study, actor: audit.Actor, numbers: list[int], note: str,
            rounds: int) -> tuple[list[Candidate], Validation]:
    """Promote trials `numbers` of `study` and queue their validation."""
    if len(set(numbers)) != len(numbers):
        raise Invalid(f"trial numbers must be distinct, got {numbers}", field="trials")
    trials = {t.number: t for t in session.execute(
        select(Trial).where(Trial.study_id == study.id, Trial.number.in_(numbers))).scalars()}
    open_numbers = set(session.execute(
        select(Candidate.trial_number).where(Candidate.study_id == study.id, Candidate.state.in_(OPEN),
                                             Candidate.artifact_id.is_(None))  # re-validations apart
    ).scalars())
    for index, number in enumerate(numbers):
        trial = trials.get(number)
        field = f"trials.{index}"
        if trial is None:
            raise NotFound(f"study {study.id} has no trial {number}", field=field)
        if trial.state != TrialState.COMPLETED:
            raise Conflict(f"trial {number} is {trial.state}; only completed trials can be promoted", field=field)
        if not trial.feasible:
            raise Conflict(f"trial {number} violates the study's constraints; only feasible trials can be "
                           "promoted", field=field)
        if trial.is_baseline:
            raise Conflict(f"trial {number} is the baseline, which candidates are compared with", field=field)
        if number in open_numbers:
            raise Conflict(f"trial {number} is a candidate already (validating or validated)", field=field)
    now = utcnow()
    candidates = [
        Candidate(study_id=study.id, team_id=study.team_id, trial_id=trials[n].id, trial_number=n,
                  config=dict(trials[n].config), note=storable_text(note), state=CANDIDATE.initial.value,
                  promoted_by=actor.token_id, promoted_by_name=actor.name, created_at=now, updated_at=now)
        for n in numbers
    ]
    session.add_all(candidates)
    session.flush()
    validation = validations.start(session, study, candidates, rounds=rounds, requested_by=actor.name)
    for candidate in candidates:
        audit.record(session, study.team_id, actor, "promote", "candidate", candidate.id, note,
                     study_id=study.id, trial_number=candidate.trial_number, validation_id=validation.id)
    return candidates, validation


def visible_candidate(session: Session, principal: Principal, candidate_id: int, role: str = "viewer") -> Candidate:
    """The candidate if the caller's team owns it (404 otherwise); locked on Postgres for a
    decision, so that two approvals of one candidate cannot both pass its state check."""
    principal.require(role)
    stmt = select(Candidate).where(Candidate.id == candidate_id)
    if role != "viewer" and is_postgres(session):
        stmt = stmt.with_for_update()
    candidate = session.execute(stmt).scalar_one_or_none()
    if candidate is None or candidate.team_id != principal.team_id:
        raise NotFound(f"no candidate {candidate_id} in your team", field="candidate_id")
    return candidate


def visible_validation(session: Session, principal: Principal, validation_id: int) -> Validation:
    principal.require("viewer")
    validation = session.get(Validation, validation_id)
    if validation is None or validation.team_id != principal.team_id:
        raise NotFound(f"no validation {validation_id} in your team", field="validation_id")
    return validation


def reject(session: Session, candidate: Candidate, actor: audit.Actor, why: str) -> Candidate:
    try:
        transition_candidate(session, candidate, CandidateState.REJECTED, actor, why)
    except IllegalTransition as exc:
        raise Conflict(f"candidate {candidate.id} is {candidate.state}; it can no longer be rejected",
                       field="candidate_id") from exc
    return candidate
