"""The ask/tell bridge between the trials table and Optuna's samplers.

Each process keeps an in-memory Optuna study per tuning study (a "mirror"), synced from the
trials table by a change sequence: only rows changed since the last sync are read, so the
cost of an ask or a tell does not grow with the study's size beyond what the sampler itself
needs. The mirror is only touched while the study row is locked, so replicas never ask or
tell the same study at once; after a failed transaction the mirror is dropped and rebuilt.
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
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
MAX_REASKS = 20
MAX_ENUMERATED = 100_000  # finite spaces up to this size are searched for unseen points


class SpaceExhausted(Exception):
    """Every point of a finite search space has been tried."""
CONFIGURATION_FAILURES = {"compile_error", "wrong_result", "timeout", "crash", "error"}
CONSTRAINT_SAMPLERS = {"nsga2", "nsga3", "tpe"}  # they rank infeasible trials by violation alone


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
        self.directions = [o["direction"] for o in study.objectives]
        self.failures_as_infeasible = doc["sampler"]["name"] in CONSTRAINT_SAMPLERS
        self.seen: set[str] = set()  # configurations the study already has
        self.refuse_repeats = doc["sampler"]["name"] != "grid"  # a grid never repeats itself
        finite = sd.grid_size([_param_model(p) for p in doc["space"]])
        self.grid = ({p["name"]: sd.grid_values(_param_model(p)) for p in doc["space"]}
                     if finite is not None and finite <= MAX_ENUMERATED and
                     all(p["type"] != "float" for p in doc["space"]) else None)
        self.rng = random.Random(doc["sampler"].get("seed"))
        self._worst: list[float] | None = None
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
        """A new configuration: (params, sampler state to keep with the row, optuna id).

        A configuration the study already has is asked again (up to MAX_REASKS times): in a
        discrete space samplers propose repeats, and a repeat teaches nothing. The refused
        proposal is told as failed, which every sampler ignores."""
        for attempt in range(MAX_REASKS + 1):
            trial = self.optuna.ask(self.distributions)
            system_attrs = self.storage.get_trial_system_attrs(trial._trial_id)
            key = config_key(trial.params)
            repeat = key in self.seen and self.refuse_repeats and "fixed_params" not in system_attrs
            if not repeat or (attempt >= MAX_REASKS - 1 and self.grid is None):
                break  # new, or a space too large to enumerate: accept the repeat
            self.optuna.tell(trial, state=TrialState.FAIL)
            if attempt == MAX_REASKS - 1:
                # the sampler keeps to what it has seen: hand it an unseen point of the finite space
                unseen = self._unseen_point()
                if unseen is None:
                    raise SpaceExhausted("every configuration of the search space has been tried")
                self.optuna.enqueue_trial(unseen)
        self.seen.add(key)
        return dict(trial.params), _jsonable(system_attrs), trial._trial_id

    def _unseen_point(self) -> dict[str, Any] | None:
        if self.grid is None:
            return None
        names = list(self.grid)
        unseen = [combo for combo in itertools.product(*self.grid.values())
                  if config_key(dict(zip(names, combo, strict=True))) not in self.seen]
        return dict(zip(names, self.rng.choice(unseen), strict=True)) if unseen else None

    def adopt(self, row: Trial, optuna_trial_id: int) -> None:
        """Remember that `row` is the trial this mirror just asked for."""
        self.ids[row.id] = optuna_trial_id
        self.running.add(row.id)
        self.watermark = max(self.watermark, row.seq)

    def _apply(self, row: Trial) -> None:
        finished = row.state in FINISHED
        self.seen.add(config_key(row.config))
        if row.id not in self.ids:
            state, values, constraints = self._told(row) if finished else (TrialState.RUNNING, None, {})
            frozen = optuna.trial.create_trial(
                state=state, values=values, params=row.config, distributions=self.distributions,
                system_attrs={**row.sampler_state, **constraints},
            )
            self.ids[row.id] = self.storage.create_new_trial(self.optuna._study_id, template_trial=frozen)
            if not finished:
                self.running.add(row.id)
        elif finished and row.id in self.running:
            trial_id = self.ids[row.id]
            state, values, constraints = self._told(row)
            for key, value in constraints.items():
                self.storage.set_trial_system_attr(trial_id, key, value)
            self.optuna.tell(self.storage.get_trial_number_from_id(trial_id), values=values, state=state)
            self.running.discard(row.id)

    def _told(self, row: Trial) -> tuple[TrialState, list[float] | None, dict[str, float]]:
        """What the sampler hears of a finished trial: (state, values, constraint values).

        Samplers that handle constraints hear of a trial that failed because of its
        configuration (compile error, wrong result, crash, timeout) as infeasible, so that
        they learn to avoid its region; a failure that says nothing about the configuration
        (lease expired, cancelled, unsupported) is a plain failure."""
        constraints: dict[str, float] = {}
        if row.state == "completed" and row.values:
            values = [float(row.values[name]) for name in self.objectives]
            self._worst = [max(w, v) if d == "minimize" else min(w, v)
                           for w, v, d in zip(self._worst or values, values, self.directions, strict=True)]
            if self.failures_as_infeasible:
                constraints[f"{CONSTRAINT_PREFIX}failed"] = 0.0
            for i, v in enumerate(row.constraint_values or []):
                constraints[f"{CONSTRAINT_PREFIX}{i}"] = float(v)
            return TrialState.COMPLETE, values, constraints
        if self.failures_as_infeasible and row.failure_reason in CONFIGURATION_FAILURES:
            constraints[f"{CONSTRAINT_PREFIX}failed"] = 1.0
            # the values of an infeasible trial rank it nowhere; the worst seen keeps them plausible
            return TrialState.COMPLETE, list(self._worst or [0.0] * len(self.objectives)), constraints
        return TrialState.FAIL, None, constraints


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _jsonable(attrs: dict[str, Any]) -> dict[str, Any]:
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
