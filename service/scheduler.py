"""The ask/tell bridge between the trials table and Optuna's samplers.

Each process keeps an in-memory Optuna study per tuning study (a "mirror"), synced from the
trials table by a change sequence: only rows changed since the last sync are read, so the
cost of an ask or a tell does not grow with the study's size beyond what the sampler itself
needs. The mirror is only touched while the study row is locked, so replicas never ask or
tell the same study at once; after a failed transaction the mirror is dropped and rebuilt.
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.domain import study_doc as sd
from service.store.models import Study, Trial

optuna.logging.set_verbosity(optuna.logging.WARNING)

CONSTRAINT_PREFIX = "constraints:"  # Optuna's system attribute for Trial.set_constraint
FINISHED = {"completed", "failed", "cancelled"}


def distributions_for(space: list[dict[str, Any]]) -> dict[str, BaseDistribution]:
    result: dict[str, BaseDistribution] = {}
    for p in space:
        kind = p["type"]
        if kind == "int":
            result[p["name"]] = IntDistribution(p["low"], p["high"], log=p.get("log", False), step=p.get("step", 1))
        elif kind == "float":
            result[p["name"]] = FloatDistribution(p["low"], p["high"], log=p.get("log", False), step=p.get("step"))
        elif kind == "categorical":
            result[p["name"]] = CategoricalDistribution(tuple(p["choices"]))
        else:
            result[p["name"]] = CategoricalDistribution((False, True))
    return result


SAMPLER_CLASSES = {
    "nsga2": optuna.samplers.NSGAIISampler,
    "nsga3": optuna.samplers.NSGAIIISampler,
    "tpe": optuna.samplers.TPESampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "grid": optuna.samplers.GridSampler,
}
RESERVED_OPTIONS = {"seed", "constraints_func", "search_space"}


def resolve_sampler_name(name: str, n_objectives: int) -> str:
    if name == "auto":
        return "nsga2" if n_objectives > 1 else "tpe"
    return name


def check_sampler_options(name: str, options: dict[str, Any]) -> None:
    """Refuse options the sampler does not take (field: sampler.options.<key>)."""
    params = inspect.signature(SAMPLER_CLASSES[name]).parameters
    allowed = sorted(k for k in params if k not in RESERVED_OPTIONS)
    for key, value in options.items():
        if key not in params or key in RESERVED_OPTIONS:
            raise sd.DocumentError(
                f"sampler.options.{key}",
                f"sampler {name!r} has no option {key!r}; it takes: {', '.join(allowed) or 'none'}",
            )
        if not isinstance(value, int | float | str | bool | type(None)):
            raise sd.DocumentError(f"sampler.options.{key}", "sampler options must be numbers, strings or booleans")
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise sd.DocumentError(
                "sampler.name", "sampler 'gp' needs PyTorch on the control plane; use nsga2, tpe or random"
            ) from exc


def make_sampler(document: dict[str, Any]) -> optuna.samplers.BaseSampler:
    sampler = document["sampler"]
    name = sampler["name"]
    options = dict(sampler.get("options") or {})
    cls = SAMPLER_CLASSES[name]
    kwargs: dict[str, Any] = {"seed": sampler.get("seed"), **options}
    if name == "grid":
        kwargs["search_space"] = {
            p["name"]: sd.grid_values(_param_model(p)) for p in document["space"]
        }
    return cls(**kwargs)


def _param_model(p: dict[str, Any]) -> Any:
    models: dict[str, type[sd.StrictModel]] = {
        "int": sd.IntParam, "float": sd.FloatParam, "categorical": sd.CategoricalParam, "bool": sd.BoolParam
    }
    return models[p["type"]].model_validate(p)


class Mirror:
    """An in-memory Optuna study that follows one study's trials table."""

    def __init__(self, study: Study) -> None:
        doc = study.document
        self.study_id = study.id
        self.objectives = [o["name"] for o in study.objectives]
        self.distributions = distributions_for(doc["space"])
        self.optuna = optuna.create_study(
            directions=[o["direction"] for o in study.objectives], sampler=make_sampler(doc)
        )
        self.storage = self.optuna._storage
        self.front: dict[int, dict[str, Any]] | None = None  # the study's front, loaded on first use
        self.ids: dict[int, int] = {}  # trials.id -> optuna trial_id
        self.running: set[int] = set()  # trials.id still RUNNING in the mirror
        self.watermark = -1
        if study.n_created == 0:
            self.optuna.enqueue_trial(doc["baseline"])

    def sync(self, session: Session) -> None:
        rows = session.execute(
            select(Trial)
            .where(Trial.study_id == self.study_id, Trial.seq > self.watermark)
            .order_by(Trial.seq)
        ).scalars()
        for row in rows:
            self._apply(row)
            self.watermark = max(self.watermark, row.seq)

    def ask(self) -> tuple[dict[str, Any], dict[str, Any], int]:
        """A new configuration: (params, sampler state to keep with the row, optuna id)."""
        trial = self.optuna.ask(self.distributions)
        system_attrs = self.storage.get_trial_system_attrs(trial._trial_id)
        return dict(trial.params), _jsonable(system_attrs), trial._trial_id

    def adopt(self, row: Trial, optuna_trial_id: int) -> None:
        """Remember that `row` is the trial this mirror just asked for."""
        self.ids[row.id] = optuna_trial_id
        self.running.add(row.id)
        self.watermark = max(self.watermark, row.seq)

    def _apply(self, row: Trial) -> None:
        finished = row.state in FINISHED
        if row.id not in self.ids:
            frozen = optuna.trial.create_trial(
                state=self._state_of(row) if finished else TrialState.RUNNING,
                values=self._values_of(row) if row.state == "completed" else None,
                params=row.config,
                distributions=self.distributions,
                system_attrs={**row.sampler_state, **self._constraint_attrs(row)},
            )
            self.ids[row.id] = self.storage.create_new_trial(self.optuna._study_id, template_trial=frozen)
            if not finished:
                self.running.add(row.id)
        elif finished and row.id in self.running:
            trial_id = self.ids[row.id]
            for key, value in self._constraint_attrs(row).items():
                self.storage.set_trial_system_attr(trial_id, key, value)
            number = self.storage.get_trial_number_from_id(trial_id)
            state = self._state_of(row)
            values = self._values_of(row) if state == TrialState.COMPLETE else None
            self.optuna.tell(number, values=values, state=state)
            self.running.discard(row.id)

    def _state_of(self, row: Trial) -> TrialState:
        return TrialState.COMPLETE if row.state == "completed" and row.values else TrialState.FAIL

    def _values_of(self, row: Trial) -> list[float]:
        assert row.values is not None
        return [float(row.values[name]) for name in self.objectives]

    def _constraint_attrs(self, row: Trial) -> dict[str, Any]:
        """Constraint values (<= 0 is feasible) as Optuna keeps them for its samplers."""
        if row.state != "completed" or not row.constraint_values:
            return {}
        return {f"{CONSTRAINT_PREFIX}{i}": float(v) for i, v in enumerate(row.constraint_values)}


def _jsonable(attrs: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(attrs, default=list))


class MirrorCache:
    """Per-process mirrors, least recently used first out."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._mirrors: OrderedDict[int, Mirror] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: Session, study: Study) -> Mirror:
        """The synced mirror of `study`; call only with the study row locked."""
        with self._lock:
            mirror = self._mirrors.pop(study.id, None)
            if mirror is None:
                mirror = Mirror(study)
            self._mirrors[study.id] = mirror
            while len(self._mirrors) > self.capacity:
                self._mirrors.popitem(last=False)
        mirror.sync(session)
        return mirror

    def drop(self, study_id: int) -> None:
        with self._lock:
            self._mirrors.pop(study_id, None)
