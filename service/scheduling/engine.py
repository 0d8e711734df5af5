"""CompileIQ's engine as a study's sampler (`sampler: compileiq`).

CompileIQ (NVIDIA's library, `compileiq` on PyPI) searches compiler controls with an
evolutionary engine through an ask/tell API; this module drives it from the study's
scheduling step, as service.scheduling.mirror drives Optuna's samplers:
- The study's space becomes the engine's: the kernel's parameters a dict of CompileIQ ranges
  and choices, each controls parameter the search-space binary of the operator's catalog
  (service.controls.catalog; the service never downloads). A candidate is a configuration,
  its generated ACF stored by sha256 (controls_files) and named by it.
- The engine is asked for its natural batch (a generation, or the replacements of failed
  candidates) only when none of its candidates is pending, so that the whole pool evaluates
  one generation in parallel: the batch waits in the mirror until the study has room for
  it, and meanwhile the step asks for nothing (SamplerWaits).
- A finished trial is told by its candidate's `param_id`: its objective values (maximised
  ones negated: the engine minimises), or INVALID_SCORE when it failed, was refused or broke
  a constraint. The baseline (no ACF) and warm-start configurations are measured, never told.
- The engine's checkpoint is written to sampler_checkpoints in the same transaction as the
  step that asked for a batch, and the step that told a generation's last result (not at
  every result: a checkpoint holds the whole ledger); a step that told other results, or
  queued candidates of a batch asked earlier, moves the row's version on. A mirror at
  another version than the row's (a restart, another replica, a scheduler process) restores
  the checkpoint and carries on with the same generation: the candidates it restores as
  pending are the trials already queued or running (told when they finish), those still
  waiting in the batch, and those whose results the steps since told, which are told again
  from the trials table (the results are there, committed with `told`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
import tempfile
import warnings
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.controls.catalog import CatalogError, ControlsCatalog
from service.domain.states import TRIAL_FINISHED, TrialState
from service.scheduling import feasibility
from service.scheduling.asks import SamplerWaits, SpaceExhausted
from service.store.models import ControlsFile, SamplerCheckpoint, Study, Trial, utcnow
from service.studies.document import DocumentError, document_of
from service.studies.space import SearchSpace
from service.trials.queries import LIGHT
from wire.contract import NO_CONTROLS
from wire.space import BoolParam, CategoricalParam, CompilerControlsParam, FloatParam, IntParam

if TYPE_CHECKING:
    from service.scheduling.fronts import Front

OPTIONS: dict[str, str] = {  # what a document may set, and what it is
    "generations": "generations the engine runs (default: as many as the budget holds)",
    "pool_size": "candidates per generation (at least 6; default: CompileIQ's for the objective count)",
    "mutation_probability": "the chance a candidate's value is mutated (0 to 1)",
    "survivor_count": "candidates of a generation that breed the next",
    "seeded_range_probability": "how many first candidates come from a range's seed bounds (0 to 1)",
}
ENGINE_OPTIONS = ("mutation_probability", "survivor_count", "seeded_range_probability")
STATE_KEY = "compileiq"  # a trial's sampler_state: {"compileiq": {"param_id", "generation"}}
FLOAT_STEPS = 1024  # a float without a step is searched on this many steps of its range
LOG_POINTS = 64


def _evaluated_by_workers(params: Any) -> Any:  # CompileIQ wants a function; the fleet evaluates
    raise RuntimeError("paretune's workers evaluate CompileIQ's candidates through the trial queue")


def available() -> bool:
    try:
        import compileiq.ciq  # noqa: F401
    except ImportError:
        return False
    return True


def check(seed: int | None, options: dict[str, Any], n_objectives: int) -> None:
    """Refuse options CompileIQ does not take or refuses (DocumentError naming the field)."""
    if not available():
        raise DocumentError("sampler.name", "sampler 'compileiq' needs CompileIQ on the control plane: install "
                            "the acf extra (pip install 'paretune[acf]'), or use nsga2, tpe or random")
    for key, value in options.items():
        if key not in OPTIONS:
            raise DocumentError(f"sampler.options.{key}", f"sampler 'compileiq' has no option {key!r}; it takes: "
                                + "; ".join(f"{k} ({v})" for k, v in OPTIONS.items()))
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DocumentError(f"sampler.options.{key}", f"sampler 'compileiq': {key} must be a number")
    try:
        _configuration(options, n_objectives, max_trials=100)
        _engine_config(seed, options)
    except Exception as exc:  # CompileIQ's own check of the values: say what it said
        field = f"sampler.options.{next(iter(options))}" if len(options) == 1 else "sampler.options"
        raise DocumentError(field, f"sampler 'compileiq' refused these options: {exc}") from exc


def _configuration(options: dict[str, Any], n_objectives: int, max_trials: int) -> Any:
    from compileiq.types import SearchConfiguration

    pool = options.get("pool_size")
    configuration = SearchConfiguration(problem_type="min", num_objectives=n_objectives, generations=1,
                                        pool_size=int(pool) if pool is not None else None)
    assert configuration.pool_size is not None
    generations = options.get("generations") or max(1, math.ceil(max_trials / configuration.pool_size))
    return SearchConfiguration(problem_type="min", num_objectives=n_objectives, generations=int(generations),
                               pool_size=configuration.pool_size)


def _engine_config(seed: int | None, options: dict[str, Any]) -> Any:
    from compileiq.backends import EngineConfig, get_backend_registration

    values = {k: v for k, v in options.items() if k in ENGINE_OPTIONS}
    if seed is not None:
        values["seed"] = seed
    model = get_backend_registration("amber").options_model
    if model is not None:
        model(**values)  # its range checks, before any study depends on them
    return EngineConfig(name="amber", options=values)


class EngineSpace:
    """A paretune search space as CompileIQ's, and the engine's candidates as configurations."""

    def __init__(self, space: SearchSpace, binaries: dict[str, Path]) -> None:
        import compileiq.search_spaces.base as ciq

        self.space = space
        self.kernel: dict[str, Any] = {}
        self.engine_controls = [p for p in space.controls if p.engine]
        for param in space.parameters:
            if isinstance(param, CompilerControlsParam) and param.engine:
                continue
            self.kernel[param.name] = _dimension(ciq, param)
        self.search_space: list[Any] = ([self.kernel] if self.kernel else []) + \
            [binaries[p.name] for p in self.engine_controls]

    def configuration(self, params: Any, baseline: dict[str, Any]
                      ) -> tuple[dict[str, Any], dict[str, tuple[bytes, CompilerControlsParam]]]:
        """(the configuration, the ACFs it names by sha256, with their parameter) of one
        candidate's params."""
        parts = list(params) if isinstance(params, list) else [params]
        config = dict(baseline)
        if self.kernel:
            chosen = parts.pop(0)
            for name in self.kernel:
                if name in chosen:  # a knocked-out parameter keeps the baseline's value
                    config[name] = _value(self.space.by_name[name], chosen[name])
        files: dict[str, tuple[bytes, CompilerControlsParam]] = {}
        for param, blob in zip(self.engine_controls, parts, strict=True):
            content = bytes.fromhex(blob)
            sha = hashlib.sha256(content).hexdigest()
            files[sha] = (content, param)
            config[param.name] = sha
        return config, files


def _dimension(ciq: Any, param: Any) -> Any:
    if isinstance(param, IntParam):
        if param.low == param.high:
            return ciq.literal(param.low)
        if param.log:
            return ciq.choice(sorted({round(v) for v in _geometric(param.low, param.high)}))
        return ciq.range(param.low, param.high, param.step)
    if isinstance(param, FloatParam):
        if param.low == param.high:
            return ciq.literal(param.low)
        if param.log:
            return ciq.log_sampling(param.low, param.high, LOG_POINTS)
        return ciq.range(param.low, param.high, param.step or (param.high - param.low) / FLOAT_STEPS)
    if isinstance(param, BoolParam):
        return ciq.choice([0, 1])
    choices = param.choices if isinstance(param, CategoricalParam) else (param.choices or [NO_CONTROLS])
    return ciq.literal(0) if len(choices) == 1 else ciq.choice(list(range(len(choices))))  # by index


def _geometric(low: float, high: float) -> list[float]:
    ratio = (high / low) ** (1 / (LOG_POINTS - 1))
    return [low * ratio**i for i in range(LOG_POINTS)]


def _value(param: Any, raw: Any) -> Any:
    if isinstance(param, IntParam):
        value = int(round(raw))
        return min(param.high, max(param.low, param.low + (value - param.low) // param.step * param.step))
    if isinstance(param, FloatParam):
        return min(param.high, max(param.low, float(raw)))
    if isinstance(param, BoolParam):
        return bool(raw)
    choices = param.choices if isinstance(param, CategoricalParam) else (param.choices or [NO_CONTROLS])
    return choices[int(raw)]


class EngineMirror:
    """A study's CompileIQ search, kept in step with the trials table and its checkpoint."""

    def __init__(self, study: Study, catalog: ControlsCatalog) -> None:
        doc = document_of(study)
        self.study_id = study.id
        self.objectives = doc.objective_names
        self.directions = [o.direction for o in doc.objectives]
        self.space = SearchSpace(doc.space)
        self.baseline: dict[str, Any] = doc.baseline
        self.seed = doc.sampler.seed
        self.options = dict(doc.sampler.options)
        self.max_trials = doc.budget.max_trials
        self.catalog = catalog
        self.feasibility = feasibility.Feasibility(doc)
        self.front: Front | None = None
        self.warm = doc.warm_configs
        self.version: int | None = None  # of the checkpoint the engine is at; None: not loaded
        self.stepped_at: int | None = None  # the study's seq as this process's last step left it
        self.search: Any = None
        self.engine_space: EngineSpace | None = None
        self.waiting: deque[Any] = deque()  # the batch's candidates not yet made trials
        self.issued: set[str] = set()  # param_ids of the engine's that are (or were) trials
        self.told: set[str] = set()
        self.new_files: dict[str, tuple[bytes, CompilerControlsParam]] = {}
        self.scores: list[Any] = []  # told by this step, handed to the engine in one call
        self.asked = False  # this step asked the engine for a batch
        self.changed = False  # the engine's state differs from the stored checkpoint
        self.workdir = Path(tempfile.mkdtemp(prefix="paretune-compileiq-"))

    def close(self) -> None:
        self.search = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- following the database ----------------------------------------------------------

    def sync(self, session: Session) -> None:
        """Load the engine from the study's checkpoint when it is not at its version (another
        process stepped the study, or this mirror is new)."""
        version = session.execute(select(SamplerCheckpoint.version)
                                  .where(SamplerCheckpoint.study_id == self.study_id)).scalar_one_or_none()
        if self.search is not None and version == self.version:
            return
        state = None if version is None else session.execute(
            select(SamplerCheckpoint.state).where(SamplerCheckpoint.study_id == self.study_id)).scalar_one()
        self._load(session, state)
        self.version = version

    def _load(self, session: Session, state: bytes | None) -> None:
        from compileiq.ciq import Search
        from compileiq.types import WorkerTypes

        binaries = {p.name: self._binary(p) for p in self.space.controls if p.engine}
        self.engine_space = EngineSpace(self.space, binaries)
        common: dict[str, Any] = {"objective_function": _evaluated_by_workers,
                                  "search_space": self.engine_space.search_space,
                                  "worker_type": WorkerTypes.MANUAL, "exit_on_failure": False,
                                  "disable_progress_bar": True, "cache_folder": self.workdir / "cache"}
        with _quiet():
            if state is None:
                configuration = _configuration(self.options, len(self.objectives), self.max_trials)
                self.search = Search(search_config=configuration, engine=_engine_config(self.seed, self.options),
                                     **common)
            else:
                path = self.workdir / "restore.json"
                path.write_bytes(state)
                self.search = Search.from_checkpoint(path, **common)
                path.unlink()
        self.scores, self.asked, self.changed = [], False, False
        self.issued, self.told = set(), set()
        pending = {str(c.param_id) for c in self.search.pending_candidates}
        replay = []
        rows = session.execute(select(Trial).options(*LIGHT).where(Trial.study_id == self.study_id)).scalars()
        for trial in rows:
            param_id = (trial.sampler_state or {}).get(STATE_KEY, {}).get("param_id")
            if param_id is None:
                continue
            self.issued.add(param_id)
            if trial.told and trial.state in TRIAL_FINISHED:
                if param_id in pending:
                    replay.append(trial)  # told since the checkpoint was written
                else:
                    self.told.add(param_id)
        for trial in replay:
            self.learn(trial)
        self._tell()
        self.changed = bool(replay)  # stored again once the generation's last result is told
        self.waiting = deque(c for c in self.search.pending_candidates if str(c.param_id) not in self.issued)

    def _binary(self, param: CompilerControlsParam) -> Path:
        try:
            entry = self.catalog.find(param.compiler, param.version, param.variant)
        except CatalogError as exc:
            raise RuntimeError(f"study {self.study_id}: {exc}") from None
        if param.search_space_sha256 and entry.sha256 != param.search_space_sha256:
            raise RuntimeError(f"study {self.study_id}: the catalog's {param.compiler} {param.version} search space "
                               f"changed since the study began ({entry.sha256[:12]}, was "
                               f"{param.search_space_sha256[:12]}): its engine cannot carry on with another")
        return entry.path

    # -- ask -------------------------------------------------------------------------------

    def ask(self, number: int) -> tuple[dict[str, Any], dict[str, Any], int]:
        """The configuration of trial `number`: the baseline, a warm-start configuration, or
        the engine's next candidate (SamplerWaits until its pending ones are told)."""
        if number == 0:
            return dict(self.baseline), {}, 0
        if number <= len(self.warm):
            return {**self.baseline, **self.warm[number - 1]}, {}, 0
        assert self.search is not None and self.engine_space is not None
        self._tell()
        if not self.waiting:
            generations = self.search._search_config.generations
            if self.search.current_generation >= generations:
                done = f"CompileIQ's engine ran its {generations} generations"
                raise SpaceExhausted(done, reason=done)
            if self.search.pending_candidates:
                raise SamplerWaits()
            with _quiet():
                self.waiting.extend(self.search.ask())
            self.asked = self.changed = True
        candidate = self.waiting.popleft()
        self.changed = True  # another replica's mirror, holding it as waiting, must reload
        config, files = self.engine_space.configuration(candidate.params, self.baseline)
        self.new_files.update(files)
        self.issued.add(str(candidate.param_id))
        state = {STATE_KEY: {"param_id": str(candidate.param_id), "generation": self.search.current_generation}}
        return config, state, 0

    def adopt(self, trial_id: int, number: int, seq: int, sampler_id: int) -> None:
        """The trial the step made of the last ask (nothing to remember: its param_id is in it)."""

    # -- tell ------------------------------------------------------------------------------

    def learn(self, row: Trial) -> None:
        """Tell the engine of a finished trial of one of its candidates (once; the step's
        tells go to the engine together, before it is asked and at the step's end)."""
        param_id = (row.sampler_state or {}).get(STATE_KEY, {}).get("param_id")
        if param_id is None or param_id in self.told or row.state not in TRIAL_FINISHED:
            return
        from compileiq.types import Score

        score = self.score(row)
        self.scores.append(Score(score=score if len(score) > 1 else score[0], param_id=param_id,
                                 num_objectives=len(self.objectives)))
        self.told.add(param_id)

    def _tell(self) -> None:
        if not self.scores:
            return
        assert self.search is not None
        with _quiet():
            self.search.tell(self.scores)
        self.scores = []
        self.changed = True

    def score(self, row: Trial) -> list[float | str]:
        """What the engine hears: the values to minimise, or INVALID_SCORE for a trial that
        failed, was refused or is over a constraint."""
        from compileiq.types import INVALID_SCORE

        feasible = all(float(v) <= 0 for v in row.constraint_values or [])
        if row.state != TrialState.COMPLETED or not row.values or not feasible:
            return [INVALID_SCORE] * len(self.objectives)
        return [float(row.values[name]) * (-1.0 if direction == "maximize" else 1.0)
                for name, direction in zip(self.objectives, self.directions, strict=True)]

    # -- the step's end --------------------------------------------------------------------

    def persist(self, session: Session) -> None:
        """The files the step's candidates generated, and the engine's checkpoint when the
        step asked for a batch or told a generation's last result, into the step's
        transaction. A step that only told results or queued waiting candidates writes no
        checkpoint but moves its version on, so that another process's mirror of the study,
        at the old version, loads the checkpoint again: it tells those results from the
        trials table and finds those candidates issued there."""
        self._tell()
        if self.new_files:
            known = set(session.execute(select(ControlsFile.sha256)
                                        .where(ControlsFile.sha256.in_(list(self.new_files)))).scalars())
            for sha, (content, param) in self.new_files.items():
                if sha not in known:
                    session.add(ControlsFile(sha256=sha, content=content, size_bytes=len(content),
                                             compiler=param.compiler, version=param.version, origin="engine",
                                             study_id=self.study_id))
            self.new_files = {}
        assert self.search is not None
        if not self.changed:
            return
        stored = session.execute(select(SamplerCheckpoint.version)
                                 .where(SamplerCheckpoint.study_id == self.study_id)).scalar_one_or_none()
        this_row = update(SamplerCheckpoint).where(SamplerCheckpoint.study_id == self.study_id)
        if stored is not None and not self.asked and self.search.pending_candidates:
            self.version = stored + 1  # the state (a hundred kilobytes and more) is neither read nor written
            session.execute(this_row.values(version=self.version, updated_at=utcnow()))
            self.changed = False
            return
        path = self.workdir / "checkpoint.json"
        with _quiet():
            self.search.save_checkpoint(path)
        state = path.read_bytes()
        path.unlink()
        self.version = (stored or 0) + 1
        if stored is None:
            session.add(SamplerCheckpoint(study_id=self.study_id, version=self.version, state=state))
        else:
            session.execute(this_row.values(version=self.version, state=state, updated_at=utcnow()))
        self.changed = self.asked = False


@contextlib.contextmanager
def _quiet() -> Any:
    """CompileIQ warns of unfilled positions after failures: the step's own accounting says it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
