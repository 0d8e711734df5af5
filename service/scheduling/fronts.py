"""Keeps each study's Pareto front, baseline ratios and hypervolume up to date.

The front is maintained incrementally in raw minimisation space (dominance does not depend
on the baseline); the hypervolume is measured in baseline-relative space, so it needs the
baseline's values and is recomputed in full once when the baseline completes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.domain import pareto
from service.domain.states import TrialState
from service.store.models import Study, Trial
from service.studies.document import ResolvedObjective, document_of
from service.trials.transitions import touch

Baseline = dict[str, Any] | None  # the baseline's values; None until it completes


def minimised(values: dict[str, Any], objectives: Sequence[ResolvedObjective]) -> tuple[float, ...]:
    return pareto.to_minimisation([float(values[o.name]) for o in objectives], [o.direction for o in objectives])


def relative_point(values: dict[str, Any], objectives: Sequence[ResolvedObjective],
                   baseline: Baseline) -> tuple[float, ...] | None:
    """Each objective as a ratio to the baseline, oriented so that smaller is better."""
    if not baseline:
        return None
    point = []
    for objective in objectives:
        value, reference = float(values[objective.name]), float(baseline.get(objective.name) or 0.0)
        if objective.direction == "minimize":
            point.append(value / reference if reference > 0 else float("inf"))
        else:
            point.append(reference / value if value > 0 else float("inf"))
    return tuple(point)


class Front:
    """A study's current front as its scheduling step keeps it across steps: the members'
    points in minimisation space and, beside each, its point in baseline-relative space (NaN
    until the baseline completes, or where not finite) in one `pareto.IncrementalFront`, and
    each member's values; computed once per member rather than once per result. With two
    objectives the hypervolume is kept as members join (`pareto.Hypervolume2D`)."""

    def __init__(self, objectives: Sequence[ResolvedObjective], reference: list[float],
                 members: dict[int, dict[str, Any]], baseline: Baseline) -> None:
        self.objectives = list(objectives)
        self.values: dict[int, dict[str, Any]] = {}
        n = len(self.objectives)
        self.members: pareto.IncrementalFront[int] = pareto.IncrementalFront(n, n_extra=n)
        self.reference = reference
        self.volume = pareto.Hypervolume2D(self.reference) if n == 2 else None
        for key, values in members.items():
            self.offer(key, values, baseline)

    def __len__(self) -> int:
        return len(self.values)

    def offer(self, key: int, values: dict[str, Any], baseline: Baseline) -> tuple[bool, list[int]]:
        """Whether the trial `key` joins the front, and the members it pushes off."""
        relative = self._relative_row(values, baseline)
        on_front, removed = self.members.update(key, minimised(values, self.objectives), relative)
        for gone in removed:
            del self.values[gone]
        if on_front:
            self.values[key] = dict(values)
            if self.volume is not None:
                self.volume.add(relative)
        return on_front, removed

    def hypervolume(self) -> float:
        """Of the members' baseline-relative points that are known and finite."""
        if self.volume is not None:
            return self.volume.volume
        rows = self.members.extra
        finite = rows[np.all(np.isfinite(rows), axis=1)]
        return float(pareto.hypervolume(finite, self.reference)) if len(finite) else 0.0

    def rebase(self, baseline: Baseline) -> None:
        """The baseline's values are new: every member's ratios are."""
        rows = [self._relative_row(self.values[key], baseline) for key in self.members.member_keys()]
        self.members.extra = np.array(rows, dtype=float).reshape(len(rows), len(self.objectives))
        if self.volume is not None:
            self.volume = pareto.Hypervolume2D(self.reference)
            for row in rows:
                self.volume.add(row)

    def _relative_row(self, values: dict[str, Any], baseline: Baseline) -> tuple[float, ...]:
        point = relative_point(values, self.objectives, baseline)
        return point if point is not None else (math.nan,) * len(self.objectives)


def load_front(session: Session, study: Study) -> Front:
    """The study's current front."""
    rows = session.execute(
        select(Trial.id, Trial.values).where(Trial.study_id == study.id, Trial.on_front.is_(True))
    ).all()
    return Front(document_of(study).objectives, study.reference_point, {row.id: row.values for row in rows},
                 study.baseline_values)


def on_completed(session: Session, study: Study, trial: Trial, front: Front, left: set[int]) -> None:
    """Account for a newly completed trial (values set, feasibility known). `front` is the
    caller's copy of the study's front (kept across calls), updated in place; the ids of
    trials it pushes off the front are added to `left` for the caller to store."""
    assert trial.values is not None
    study.n_completed += 1
    trial.completed_index = study.n_completed
    if study.baseline_values:
        trial.relative = pareto.relative_to_baseline(trial.values, study.baseline_values)
    front_changed = False
    if trial.feasible:
        _update_best(study, front.objectives, trial.values)
        front_changed = _update_front(study, trial, front, left)
    if trial.is_baseline:
        _on_baseline(session, study, front.objectives, trial)
        front.rebase(study.baseline_values)
    elif study.baseline_values and front_changed:
        study.hypervolume = front.hypervolume()
    trial.hypervolume_after = study.hypervolume


def _update_best(study: Study, objectives: Sequence[ResolvedObjective], values: dict[str, Any]) -> None:
    best = dict(study.best or {})
    for objective in objectives:
        name, value = objective.name, float(values[objective.name])
        better = min if objective.direction == "minimize" else max
        best[name] = value if name not in best else better(best[name], value)
    study.best = best


def _update_front(study: Study, trial: Trial, front: Front, left: set[int]) -> bool:
    """Add the trial to the front if nothing there dominates it; returns whether it joined."""
    on_front, removed = front.offer(trial.id, trial.values or {}, study.baseline_values)
    left.update(removed)
    trial.on_front = on_front
    study.front_size = len(front)
    return on_front


def _on_baseline(session: Session, study: Study, objectives: Sequence[ResolvedObjective], baseline: Trial) -> None:
    """The baseline completed: fill ratios and the hypervolume history of earlier trials."""
    study.baseline_values = dict(baseline.values or {})
    rows = list(session.execute(
        select(Trial)
        .where(Trial.study_id == study.id, Trial.state == TrialState.COMPLETED.value,
               Trial.completed_index.is_not(None))
        .order_by(Trial.completed_index)
    ).scalars())
    if baseline not in rows:
        rows.append(baseline)
    points, owners = [], []
    for row in rows:
        row.relative = pareto.relative_to_baseline(row.values or {}, study.baseline_values)
        if row.feasible:
            point = relative_point(row.values or {}, objectives, study.baseline_values)
            if point is not None and all(np.isfinite(point)):
                points.append(point)
                owners.append(row)
    history = pareto.hypervolume_history(np.array(points), study.reference_point) if points else []
    value_by_row = {id(row): hv for row, hv in zip(owners, history, strict=True)}
    current = 0.0
    for row in rows:
        current = value_by_row.get(id(row), current)
        row.hypervolume_after = current
    study.hypervolume = current
    touch(session, [row for row in rows if row is not baseline])  # their ratios are new
