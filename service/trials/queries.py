"""Reading trials: keyset pages in any order the API offers, the front and its history."""

from __future__ import annotations

import base64
import binascii
import json
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, String, Text, and_, case, cast, func, literal, or_, select
from sqlalchemy.orm import QueryableAttribute, Session, defer

from service.domain.states import TrialState
from service.errors import Invalid
from service.store.db import is_postgres
from service.store.models import Study, Trial, constant
from service.studies.document import document_of

MAX_CURSOR_CHARS = 512
# what scheduling reads of a trial: not its logs and reports
LIGHT = (defer(Trial.log), defer(Trial.metrics), defer(Trial.correctness), defer(Trial.compile_report),
         defer(Trial.environment), defer(Trial.timings), defer(Trial.fingerprint), defer(Trial.message))


def infeasible() -> tuple[Any, ...]:
    """Accounted trials that failed because their configuration cannot launch."""
    return (Trial.state == constant(TrialState.FAILED.value), Trial.failure_reason == constant("infeasible"),
            Trial.told.is_(True))


def infeasible_counts(session: Session, study_ids: Sequence[int]) -> dict[int, int]:
    """How many of each study's accounted trials are infeasible (none listed: none)."""
    if not study_ids:
        return {}
    rows = session.execute(select(Trial.study_id, func.count()).where(Trial.study_id.in_(study_ids), *infeasible())
                           .group_by(Trial.study_id))
    return {int(study_id): int(count) for study_id, count in rows}


def encode_cursor(parts: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode()


def decode_cursor(cursor: str, kinds: Sequence[Any]) -> list[Any]:
    """The cursor's parts, checked to be of `kinds` (a cursor is opaque to clients)."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(parts, list) or len(parts) != len(kinds):
            raise ValueError("wrong shape")
        for part, kind in zip(parts, kinds, strict=True):
            if isinstance(part, bool) or not isinstance(part, kind):
                raise ValueError("wrong part")
            if isinstance(part, float) and not math.isfinite(part) or isinstance(part, int) and abs(part) >= 2**63:
                raise ValueError("out of range")
        return parts
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise Invalid("cursor is not one this API returned; pass next_cursor back unchanged",
                      field="cursor") from exc


def parse_states(text: str | None) -> list[str]:
    states = text.split(",") if text else []
    names = [s.value for s in TrialState]
    for state in states:
        if state not in names:
            raise Invalid(f"unknown trial state {state!r}; use {', '.join(names)}", field="state")
    return states


def page(session: Session, study: Study, *, states: list[str], on_front: bool | None, sort: str, limit: int,
         cursor: str | None) -> tuple[list[Trial], str | None]:
    """A keyset page: the page's trial numbers, filtered and ordered where an index holds
    what it needs (the (study_id, seq) index carries each trial's state, front flag and
    values, so sorting by an objective reads no trial row), then the page's rows."""
    stmt, key = _sorted(study, sort, cursor)
    stmt = stmt.where(Trial.study_id == study.id)
    if states:
        stmt = stmt.where(Trial.state.in_(states))
    if on_front is not None:
        stmt = stmt.where(Trial.on_front.is_(on_front))
    keys = session.execute(stmt.limit(limit + 1)).all()
    numbers = [row.number for row in keys[:limit]]
    rows = {t.number: t for t in session.execute(
        select(Trial).where(Trial.study_id == study.id, Trial.number.in_(numbers))).scalars()}
    next_cursor = encode_cursor(key(keys[limit - 1])) if len(keys) > limit else None
    return [rows[n] for n in numbers if n in rows], next_cursor


def _sorted(study: Study, sort: str, cursor: str | None) -> tuple[Select[Any], Any]:
    """Keyset pagination: order by (key, number) and continue after the cursor's key; the
    statement selects the key and the number, and the function turns a row into a cursor."""
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    if name == "number":
        after = decode_cursor(cursor, [int]) if cursor else None
        column = Trial.number
        stmt = select(column).order_by(column.desc() if descending else column)
        if after:
            stmt = stmt.where(column < after[0] if descending else column > after[0])
        return stmt, lambda row: [row.number]
    if name not in document_of(study).objective_names:
        raise Invalid(f"cannot sort by {name!r}; use number or an objective of this study", field="sort")
    after = decode_cursor(cursor, [int | float, int]) if cursor else None
    value = Trial.values[name].as_float().label("value")
    stmt = select(value, Trial.number).where(Trial.values.is_not(None))
    stmt = stmt.order_by(*((value.desc(), Trial.number.desc()) if descending else (value, Trial.number)))
    if after:
        v, n = float(after[0]), after[1]
        if descending:
            stmt = stmt.where(or_(value < v, and_(value == v, Trial.number < n)))
        else:
            stmt = stmt.where(or_(value > v, and_(value == v, Trial.number > n)))
    return stmt, lambda row: [row.value, row.number]


def by_number(session: Session, study_id: int, number: int) -> Trial | None:
    return session.execute(
        select(Trial).where(Trial.study_id == study_id, Trial.number == number)
    ).scalar_one_or_none()


def front(session: Session, study_id: int) -> tuple[list[Trial], Trial | None]:
    members = session.execute(
        select(Trial).where(Trial.study_id == study_id, Trial.on_front.is_(True)).order_by(Trial.number)
    ).scalars().all()
    baseline = session.execute(  # the study's first trial (service.scheduling.step): found by its number
        select(Trial).where(Trial.study_id == study_id, Trial.number == 0, Trial.is_baseline.is_(True))
    ).scalar_one_or_none()
    return list(members), baseline


def hypervolume_history(session: Session, study: Study, points: int) -> list[tuple[int, float]]:
    """Hypervolume by completed-trial count, thinned to about `points` entries."""
    total = study.n_completed
    stride = max(1, total // points)
    wanted = sorted({*range(stride, total + 1, stride), total})  # looked up, not filtered from every trial
    stmt = select(Trial.completed_index, Trial.hypervolume_after).where(
        Trial.study_id == study.id, Trial.completed_index.in_(wanted), Trial.hypervolume_after.is_not(None)
    )
    rows = session.execute(stmt.order_by(Trial.completed_index)).all()
    return [(r[0], r[1]) for r in rows if r[0] is not None and r[1] is not None]


# the trials a study's plots draw: finished and accounted for by its step
PLOTTED = (TrialState.COMPLETED.value, TrialState.SCREENED_OUT.value)
# SQLite's `->` (3.38 and later) gives a JSON value's text; from an older one the values
# objects come whole and are split here (json_extract's float would print with 15 digits)
SQLITE_ARROW = sqlite3.sqlite_version_info >= (3, 38)


@dataclass
class Points:
    """Plotted trials as parallel columns, each a JSON array: element i of each is one trial."""

    cursor: int  # the highest sequence number read
    numbers: str
    values: list[str]  # one array per objective
    on_front: str
    feasible: str
    screened_out: str
    baseline: int | None


def points(session: Session, study_id: int, objectives: Sequence[str], since: int) -> Points:
    """The study's completed and screened-out trials that changed after sequence number
    `since`, as columns that the database writes as JSON arrays in one pass over the
    (study_id, seq) index: no row of a study's 100,000 reaches Python. The objective values
    are the JSON text stored (SQLite would print a float with 15 digits).

    Only trials the study's step has accounted for are read, and every change to one of
    those is the step's: the step holds the study's lock, so their sequence numbers grow in
    commit order and a client that passes `cursor` back as `since` misses none of them."""
    postgres = is_postgres(session)
    array = func.json_agg if postgres else func.json_group_array

    def column(expression: ColumnElement[Any] | QueryableAttribute[Any]) -> ColumnElement[str]:
        return cast(array(expression), Text)  # text, which the driver would otherwise parse

    def value(name: str) -> ColumnElement[Any]:
        path = literal(name if postgres else f'$."{name}"', String)
        return Trial.values.op("->")(path)

    whole = not postgres and not SQLITE_ARROW
    flags = (Trial.on_front, Trial.feasible, Trial.state == TrialState.SCREENED_OUT.value)
    values = [column(func.json(Trial.values))] if whole else [column(value(name)) for name in objectives]
    stmt = (select(func.max(Trial.seq), func.max(case((Trial.is_baseline, Trial.number))), column(Trial.number),
                   *(column(flag) for flag in flags), *values)
            .where(Trial.study_id == study_id, Trial.seq > since, Trial.state.in_(PLOTTED), Trial.told.is_(True)))
    cursor, baseline, numbers, *arrays = session.execute(stmt).one()
    if cursor is None:  # Postgres aggregates no row to null
        return Points(cursor=since, numbers="[]", values=["[]"] * len(objectives), on_front="[]", feasible="[]",
                      screened_out="[]", baseline=None)
    on_front, feasible, screened_out = arrays[:3] if postgres else [_booleans(a) for a in arrays[:3]]
    return Points(cursor=cursor, numbers=numbers, values=_split(arrays[3], objectives) if whole else arrays[3:],
                  on_front=on_front, feasible=feasible, screened_out=screened_out, baseline=baseline)


def _booleans(array: str) -> str:
    """An array of SQLite's booleans (0, 1 and null) with JSON's."""
    return array.replace("0", "false").replace("1", "true")


def _split(objects: str, objectives: Sequence[str]) -> list[str]:
    """An array of values objects (null where a trial has none) as one array per objective."""
    rows = json.loads(objects)
    return [json.dumps([row.get(name) if row else None for row in rows], separators=(",", ":")) for name in objectives]


def changed_since(session: Session, study_id: int, after: int, limit: int) -> list[Trial]:
    return list(session.execute(
        select(Trial).where(Trial.study_id == study_id, Trial.seq > after).order_by(Trial.seq).limit(limit)
    ).scalars())
