"""Retention: the trials of studies that finished longer ago than the operator keeps them
(`PARETUNE_TRIAL_RETENTION_DAYS`) are deleted in small batches by each replica's upkeep, but
for what the study still shows and what was built on it: its baseline, the trials on its
front, and the trials promoted to candidates (artifacts name them). The study row keeps its
counts, best values and hypervolume.

Each batch is one short transaction over finished studies' rows, which no lease, result or
scheduling step touches; on Postgres rows another replica is deleting are skipped, so
replicas never wait for each other.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.domain.states import STUDY_FINISHED
from service.store.db import is_postgres
from service.store.models import Candidate, Study, Trial, utcnow

BATCH = 500


def prune(session: Session, days: float, limit: int = BATCH) -> int:
    """Delete up to `limit` trials past retention; how many were deleted."""
    cutoff = utcnow() - timedelta(days=days)
    finished = select(Study.id).where(Study.state.in_([s.value for s in STUDY_FINISHED]), Study.finished_at < cutoff)
    doomed = (select(Trial.id)
              .where(Trial.study_id.in_(finished), Trial.on_front.is_(False), Trial.is_baseline.is_(False),
                     Trial.id.not_in(select(Candidate.trial_id)))
              .limit(limit))
    if is_postgres(session):
        doomed = doomed.with_for_update(skip_locked=True)
    ids = list(session.execute(doomed).scalars())
    if ids:
        session.execute(delete(Trial).where(Trial.id.in_(ids)))
    return len(ids)
