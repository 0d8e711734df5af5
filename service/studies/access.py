"""Who sees which study: a team sees its own studies only; another team's do not exist."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.accounts.tokens import Principal
from service.errors import NotFound
from service.store.models import Study


def visible_study(session: Session, principal: Principal, study_id: int, role: str = "viewer") -> Study:
    """The study if the caller's team owns it and the caller has `role` (404 otherwise)."""
    principal.require(role)
    study = session.get(Study, study_id)
    if study is None or study.team_id != principal.team_id:
        raise NotFound(f"no study {study_id} in your team", field="study_id")
    return study
