"""Retention: the trials of studies that finished longer ago than the operator keeps them
(`PARETUNE_TRIAL_RETENTION_DAYS`) are deleted in small batches by each replica's upkeep, but
for what the study still shows and what was built on it: its baseline, the trials on its
front, and the trials promoted to candidates (artifacts name them). The study row keeps its
counts, best values and hypervolume.

Retention works through finished studies in the order they finished, one study's trials at
a time through its own index entries, and marks a study done (`trials_pruned_at`) once none
of its trials is left to delete: an upkeep reads the studies still to prune, never the
trials of studies it is done with, however many are kept.

Each batch is one short transaction over finished studies' rows, which no lease, result or
scheduling step touches; on Postgres the rows (studies and trials) another replica is
pruning are skipped, so replicas never wait for each other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Select, delete, exists, select, update
from sqlalchemy.orm import Session

from service.domain.states import STUDY_FINISHED
from service.store.db import is_postgres
from service.store.models import Candidate, Study, Trial, utcnow

BATCH = 500


def prune(session: Session, days: float, limit: int = BATCH) -> int:
    """Delete up to `limit` trials past retention; how many were deleted."""
    cutoff = utcnow() - timedelta(days=days)
    deleted = 0
    skipped: list[int] = []  # studies whose deletable trials another replica holds
    while deleted < limit:
        study_id = _next_study(session, cutoff, skipped)
        if study_id is None:
            break
        deleted += _prune_study(session, study_id, limit - deleted)
        if deleted < limit:  # nothing of it was left to delete, or another replica holds the rest
            if session.execute(select(exists(_deletable(study_id)))).scalar():
                skipped.append(study_id)
            else:
                session.execute(update(Study).where(Study.id == study_id).values(trials_pruned_at=utcnow()))
    return deleted


def _next_study(session: Session, cutoff: datetime, skipped: list[int]) -> int | None:
    """The finished study past retention that retention is not done with, earliest first."""
    query = (select(Study.id)
             .where(Study.trials_pruned_at.is_(None), Study.finished_at < cutoff,
                    Study.state.in_([s.value for s in STUDY_FINISHED]))
             .order_by(Study.trials_pruned_at, Study.finished_at).limit(1))
    if skipped:
        query = query.where(Study.id.not_in(skipped))
    if is_postgres(session):
        query = query.with_for_update(skip_locked=True)
    return session.execute(query).scalar()


def _deletable(study_id: int) -> Select[int]:
    """The study's trials retention deletes."""
    return select(Trial.id).where(
        Trial.study_id == study_id, Trial.on_front.is_(False), Trial.is_baseline.is_(False),
        Trial.id.not_in(select(Candidate.trial_id).where(Candidate.study_id == study_id)))


def _prune_study(session: Session, study_id: int, limit: int) -> int:
    doomed = _deletable(study_id).limit(limit)
    if is_postgres(session):
        doomed = doomed.with_for_update(skip_locked=True)
    ids = list(session.execute(doomed).scalars())
    if ids:
        session.execute(delete(Trial).where(Trial.id.in_(ids)))
    return len(ids)
