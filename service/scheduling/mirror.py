"""The ask/tell bridge between the trials table and Optuna's samplers.

Each process keeps an in-memory Optuna study per tuning study (a "mirror"). It is used only
inside the study's scheduling step, which holds the study's lock, so two replicas never ask
or tell the same study at once. A mirror follows the table in two ways:
- trials created by another replica's steps are read by the change sequence (steps are
  serialised by the lock, so their sequence numbers grow in commit order);
- finished trials are told from the step's list of trials it has not accounted for yet
  (`told` is false), never from the sequence alone, so a result committed late with an
  earlier sequence number is told all the same.
Where the study's row is as this process's last step left it, no other step has run since,
and the read by sequence is skipped (MirrorCache.get).
After a failed step the mirror is dropped and rebuilt from the table, where nothing of the
failed step was kept: a tell is neither lost nor repeated.
"""

from __future__ import annotations

import json
import random
import threading
from typing import TYPE_CHECKING, Any

import optuna
from cachetools import LRUCache
from optuna.study._tell import _tell_with_warning
from optuna.trial import TrialState as OptunaState
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.controls.catalog import ControlsCatalog
from service.domain.results import constraint_value
from service.domain.states import TRIAL_FINISHED, TrialState
from service.scheduling import feasibility, lfbo, samplers
from service.scheduling.asks import SpaceExhausted
from service.scheduling.engine import EngineMirror
from service.store.models import Study, Trial
from service.studies.document import document_of
from service.studies.space import MAX_GRID_POINTS, SearchSpace
from service.trials.queries import LIGHT
from wire.contract import FailureReason
from wire.kernels.resources import parse_refusals

if TYPE_CHECKING:
    from service.scheduling.fronts import Front

optuna.logging.set_verbosity(optuna.logging.WARNING)

CONSTRAINT_PREFIX = "constraints:"  # Optuna's system attribute for Trial.set_constraint
MAX_REASKS = 20
MAX_SCANNED = 100_000  # points of a finite space scanned for an unseen one, at most
CONFIGURATION_FAILURES = {"compile_error", "wrong_result", "timeout", "crash", "error"}
INFEASIBLE = FailureReason.INFEASIBLE.value  # over the device's limits: told with how far over


class Mirror:
    """An in-memory Optuna study that follows one study's trials table."""

    def __init__(self, study: Study) -> None:
        doc = document_of(study)
        sampler = doc.sampler
        self.study_id = study.id
        self.objectives = doc.objective_names
        self.directions = [o.direction for o in doc.objectives]
        self.constraints = doc.constraints
        self.space = SearchSpace(doc.space)
        self.is_grid = sampler.name == "grid"
        self.failures_as_infeasible = sampler.name in samplers.CONSTRAINT_SAMPLERS
        self.feasibility = feasibility.Feasibility(doc)  # what cannot launch on the study's target
        size = self.space.grid_size()
        # the grid sampler walks the grid; other samplers are handed an unseen point of a
        # finite space only without floats, whose values may not compare equal once sampled
        walkable = size is not None and size <= MAX_GRID_POINTS and (self.is_grid or self.space.is_discrete())
        self.order = self.space.grid_order(sampler.seed) if walkable else None
        self.rng = random.Random(sampler.seed)
        self.seen: set[str] = set()  # configurations the study already has
        self._worst: list[float] | None = None
        self.view = self.space.sampler_view(sampler.ordered_choices)
        self.distributions = self.view.distributions
        structured = history = None
        if sampler.name == "lfbo":
            kernel = doc.kernel
            structured = lfbo.structured_space(self.distributions, self.view.from_sampler, kernel.backend,
                                               kernel.builtin, kernel.workload)
            learned = [(s.workload, s.distance, s.configs) for s in doc.warm_start_learned or []]
            history = lfbo.history(structured, self.view.to_sampler, self.view.from_sampler, kernel.backend,
                                   kernel.builtin, learned) if learned else None
        self.optuna = optuna.create_study(
            directions=self.directions,
            sampler=samplers.build(sampler.name, sampler.seed, dict(sampler.options), structured, history),
        )
        self.storage = self.optuna._storage
        self.front: Front | None = None  # the study's front, loaded on first use
        self.ids: dict[int, int] = {}  # trials.id -> optuna trial_id
        self.running: set[int] = set()  # trials.id still RUNNING in the mirror
        self.watermark = -1
        self.next_number = 0  # every trial numbered below is known
        self.stepped_at: int | None = None  # the study's seq as this process's last step left it
        if study.n_created == 0:
            self.optuna.enqueue_trial(self.view.to_sampler(doc.baseline))
        self.warm = doc.warm_configs

    def sync(self, session: Session) -> None:
        """Learn the trials created by other replicas' steps and those finished since."""
        rows = session.execute(
            select(Trial).options(*LIGHT)
            .where(Trial.study_id == self.study_id, Trial.seq > self.watermark,
                   or_(Trial.state.in_([s.value for s in TRIAL_FINISHED]), Trial.number >= self.next_number))
            .order_by(Trial.seq)
        ).scalars()
        for row in rows:
            self.learn(row)
            self.watermark = max(self.watermark, row.seq)

    def ask(self, number: int) -> tuple[dict[str, Any], dict[str, Any], int]:
        """The configuration of trial `number`: (params, sampler state to keep with the
        row, optuna id). A grid study takes its next grid point.

        Elsewhere a configuration the study already has is asked again (up to MAX_REASKS
        times): in a discrete space samplers propose repeats, and a repeat teaches nothing.
        The refused proposal is told as failed, which every sampler ignores."""
        if self.is_grid and number > 0:
            self._enqueue_grid_point(number - 1)
        elif 0 < number <= len(self.warm) and config_key(self.warm[number - 1]) not in self.seen:
            self.optuna.enqueue_trial(self.view.to_sampler(self.warm[number - 1]))
        for attempt in range(MAX_REASKS):
            trial = self.optuna.ask(self.distributions)
            config = self.view.from_sampler(trial.params)
            key = config_key(config)
            repeat = self._is_repeat(trial, key)
            if not repeat or attempt == MAX_REASKS - 1:
                break
            self._tell(trial._trial_id, OptunaState.FAIL)
        if repeat:
            # the sampler keeps to what it has seen: hand it an unseen point of a finite space
            unseen = self._unseen_point()
            exhausted = unseen is None and self.order is not None and self.order.size <= MAX_SCANNED
            if unseen is not None or exhausted:
                self._tell(trial._trial_id, OptunaState.FAIL)
            if exhausted:
                raise SpaceExhausted("every configuration of the search space has been tried")
            if unseen is not None:
                self.optuna.enqueue_trial(self.view.to_sampler(unseen))
                trial = self.optuna.ask(self.distributions)
                config = self.view.from_sampler(trial.params)
                key = config_key(config)
        self.seen.add(key)
        system_attrs = self.storage.get_trial_system_attrs(trial._trial_id)
        return config, _jsonable(system_attrs), trial._trial_id

    def _is_repeat(self, trial: optuna.Trial, key: str) -> bool:
        """Whether the sampler proposed a configuration the study has (`key`), not as one it
        was handed to try."""
        if self.is_grid or key not in self.seen:
            return False
        return "fixed_params" not in self.storage.get_trial_system_attrs(trial._trial_id)

    def _enqueue_grid_point(self, position: int) -> None:
        assert self.order is not None
        if position >= self.order.size:
            raise SpaceExhausted("every point of the grid has been tried")
        self.optuna.enqueue_trial(self.view.to_sampler(self.space.grid_point(self.order[position])))

    def _unseen_point(self) -> dict[str, Any] | None:
        if self.order is None:
            return None
        start = self.rng.randrange(self.order.size)
        for offset in range(min(self.order.size, MAX_SCANNED)):
            point = self.space.grid_point(self.order[(start + offset) % self.order.size])
            if config_key(point) not in self.seen:
                return point
        return None

    def persist(self, session: Session) -> None:
        """Nothing of an Optuna mirror is stored: the trials table is its state."""

    def close(self) -> None:
        return None

    def adopt(self, trial_id: int, number: int, seq: int, optuna_trial_id: int) -> None:
        """Remember that trial `trial_id` (its number and sequence number) is the one this
        mirror just asked for."""
        self.ids[trial_id] = optuna_trial_id
        self.running.add(trial_id)
        self.watermark = max(self.watermark, seq)
        self.next_number = max(self.next_number, number + 1)

    def learn(self, row: Trial) -> None:
        """Bring the mirror up to date with one row: a trial it does not know is added (as
        finished, with what the sampler should hear, or running); a trial it holds as
        running that has finished is told. Idempotent."""
        finished = row.state in TRIAL_FINISHED
        self.next_number = max(self.next_number, row.number + 1)
        if row.id not in self.ids:  # (the configuration of a trial it asked for is seen since the ask)
            self.seen.add(config_key(row.config))
            state, values, constraints = self._told(row) if finished else (OptunaState.RUNNING, None, {})
            frozen = optuna.trial.create_trial(
                state=state, values=values, params=self.view.to_sampler(row.config), distributions=self.distributions,
                system_attrs={**row.sampler_state, **constraints},
            )
            self.ids[row.id] = self.storage.create_new_trial(self.optuna._study_id, template_trial=frozen)
            if not finished:
                self.running.add(row.id)
            elif state == OptunaState.COMPLETE and hasattr(self.optuna.sampler, "observe_completed"):
                self.optuna.sampler.observe_completed(self.storage.get_trial(self.ids[row.id]))
        elif finished and row.id in self.running:
            trial_id = self.ids[row.id]
            state, values, constraints = self._told(row)
            for key, value in constraints.items():
                self.storage.set_trial_system_attr(trial_id, key, value)
            self._tell(trial_id, state, values)
            self.running.discard(row.id)

    def _tell(self, trial_id: int, state: OptunaState, values: list[float] | None = None) -> None:
        """Optuna's Study.tell without the deep copy of the trial it returns, which the
        mirror never reads (bench/results/restructure.md)."""
        _tell_with_warning(self.optuna, self.storage.get_trial_number_from_id(trial_id), values, state)

    def _told(self, row: Trial) -> tuple[OptunaState, list[float] | None, dict[str, float]]:
        """What the sampler hears of a finished trial: (state, values, constraint values).

        Samplers that handle constraints hear of a trial that failed because of its
        configuration (compile error, wrong result, crash, timeout) as infeasible, so that
        they learn to avoid its region; a failure that says nothing about the configuration
        (lease expired, cancelled, unsupported) is a plain failure. A configuration that
        cannot launch (reason infeasible) violates the `resources` constraint by how far it
        is over the device's limit (0.27: 27% more shared memory than there is), so the
        sampler ranks a near miss above a far one; every other trial has it at 0.

        A trial measured fully is told once, with its full values, when that stage completes
        (until then the sampler holds it as running). A trial screened out is told complete
        with what the screen measured, and the objectives it did not measure as the
        promotion rule bounded them (service.scheduling.screening.told_values): values the front
        member that screened it out dominates, as it does; of its constraints, those on
        screened metrics."""
        constraints: dict[str, float] = {}
        if row.state == TrialState.SCREENED_OUT and row.screening and row.screening.get("told"):
            values = self._note([float(row.screening["told"][name]) for name in self.objectives])
            if self.failures_as_infeasible:
                constraints[f"{CONSTRAINT_PREFIX}failed"] = 0.0
                constraints[f"{CONSTRAINT_PREFIX}resources"] = 0.0
            screened = row.screening.get("values") or {}
            for i, constraint in enumerate(self.constraints):
                if constraint.metric in screened:
                    measured = float(screened[constraint.metric])
                    constraints[f"{CONSTRAINT_PREFIX}{i}"] = constraint_value(constraint.op, constraint.value, measured)
            return OptunaState.COMPLETE, values, constraints
        if row.state == TrialState.COMPLETED and row.values:
            values = self._note([float(row.values[name]) for name in self.objectives])
            if self.failures_as_infeasible:
                constraints[f"{CONSTRAINT_PREFIX}failed"] = 0.0
                constraints[f"{CONSTRAINT_PREFIX}resources"] = 0.0
            for i, v in enumerate(row.constraint_values or []):
                constraints[f"{CONSTRAINT_PREFIX}{i}"] = float(v)
            return OptunaState.COMPLETE, values, constraints
        if self.failures_as_infeasible and row.failure_reason in CONFIGURATION_FAILURES | {INFEASIBLE}:
            infeasible = row.failure_reason == INFEASIBLE
            constraints[f"{CONSTRAINT_PREFIX}failed"] = 0.0 if infeasible else 1.0
            constraints[f"{CONSTRAINT_PREFIX}resources"] = resource_excess(row) if infeasible else 0.0
            # the values of an infeasible trial rank it nowhere; the worst seen keeps them plausible
            return OptunaState.COMPLETE, list(self._worst or [0.0] * len(self.objectives)), constraints
        return OptunaState.FAIL, None, constraints

    def _note(self, values: list[float]) -> list[float]:
        """Values told complete: the worst seen so far follows them."""
        self._worst = [max(w, v) if d == "minimize" else min(w, v)
                       for w, v, d in zip(self._worst or values, values, self.directions, strict=True)]
        return values


def resource_excess(row: Trial) -> float:
    """How far an infeasible trial is over its device's limits (the largest fraction over),
    from what the service recorded when it refused it, else the worker's message; 1.0 when
    neither says."""
    report = (row.compile_report or {}).get("resources") or {}
    found = [float(v["excess"]) for v in report.get("violations") or [] if isinstance(v, dict) and "excess" in v]
    found += [v.excess for v in parse_refusals(row.message or "")]
    return max([v for v in found if v > 0], default=1.0)


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _jsonable(attrs: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(attrs, default=list))  # type: ignore[no-any-return]


StudyMirror = Mirror | EngineMirror  # what a study's step asks and tells


class MirrorCache:
    """Per-process mirrors, least recently used first out: Optuna's, or CompileIQ's engine
    (service.scheduling.engine) for `sampler: compileiq`."""

    def __init__(self, catalog: ControlsCatalog, capacity: int = 1024) -> None:
        self.catalog = catalog
        self._mirrors: LRUCache[int, StudyMirror] = LRUCache(maxsize=capacity)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    def get(self, session: Session, study: Study) -> StudyMirror:
        """The synced mirror of `study`; call only with the study's lock held. A mirror that
        this process's last step of the study left, with the study's row unchanged since
        (its seq), is in sync without reading: every step that creates, tells or decides
        trials, and every change of the study, gives the study a new seq, and a trial that
        finishes outside a step is told from the step's untold trials."""
        evicted: StudyMirror | None = None
        with self._lock:
            mirror = self._mirrors.get(study.id)
            if mirror is None:
                engine = document_of(study).sampler.name == "compileiq"
                mirror = EngineMirror(study, self.catalog) if engine else Mirror(study)
                if len(self._mirrors) >= self._mirrors.maxsize:  # taken here to close it outside the lock
                    evicted = self._mirrors.popitem()[1]
                self._mirrors[study.id] = mirror
        if evicted is not None:
            evicted.close()
        try:
            if mirror.stepped_at != study.seq:
                mirror.sync(session)
        except BaseException:
            self.drop(study.id)
            raise
        return mirror

    def drop(self, study_id: int) -> None:
        with self._lock:
            mirror = self._mirrors.pop(study_id, None)
        if mirror is not None:
            mirror.close()

    def clear(self) -> None:
        with self._lock:
            mirrors = list(self._mirrors.values())
            self._mirrors.clear()
        for mirror in mirrors:
            mirror.close()
