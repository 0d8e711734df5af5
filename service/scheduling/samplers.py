"""Optuna's samplers by the names a study document uses, checked by constructing them.

The `grid` sampler is Optuna's RandomSampler fed the grid's points one by one (see
service.scheduling.mirror): Optuna's GridSampler materialises every point of the grid, and a
small document can describe billions of them.
"""

from __future__ import annotations

import bisect
import inspect
import math
import re
from collections import defaultdict
from typing import Any

import optuna
from optuna import Study
from optuna.distributions import BaseDistribution
from optuna.samplers._ga._base import BaseGASampler
from optuna.trial import FrozenTrial, TrialState

from service.scheduling import engine
from service.scheduling.lfbo import History, LFBOSampler, StructuredSpace
from service.studies.document import DocumentError


def _indexed(base: type[BaseGASampler]) -> type[BaseGASampler]:
    """`base`, answering its generation questions from an index instead of a scan.

    Optuna's genetic samplers find a new trial's generation and its parents by scanning every
    trial of the study on each ask, 9 ms per ask at 10,000 trials, and their search space by
    scanning back to the oldest trial still running, 3 ms per ask with 400 trials in flight.
    The mirror shows the sampler every trial that completes (Optuna's after_trial on a tell,
    `observe_completed` for a trial added complete), so an index of completed trials by
    generation and a search space narrowed at each completion give the same answers, in the
    same order, at a cost that grows with neither."""

    class Indexed(base):  # type: ignore[valid-type,misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._completed: dict[int, list[int]] = defaultdict(list)  # generation -> trial ids, ascending
            self._parents: dict[int, list[FrozenTrial]] = {}
            self._search_space = CompletedIntersection()  # what the base class's infer_relative_search_space reads

        def observe_completed(self, trial: FrozenTrial) -> None:
            self._search_space.add(trial.distributions)
            generation = trial.system_attrs.get(self._get_generation_key())
            if generation is not None:
                bisect.insort(self._completed[generation], trial._trial_id)

        def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
            super().after_trial(study, trial, state, values)
            if state == TrialState.COMPLETE:
                self.observe_completed(study._storage.get_trial(trial._trial_id))

        def get_trial_generation(self, study: Study, trial: FrozenTrial) -> int:
            generation = trial.system_attrs.get(self._get_generation_key())
            if generation is not None:
                return int(generation)
            top = max((g for g in self._completed if g >= 0), default=0)
            assert self._population_size is not None
            generation = top if len(self._completed.get(top, ())) < self._population_size else top + 1
            study._storage.set_trial_system_attr(trial._trial_id, self._get_generation_key(), generation)
            return generation

        def get_population(self, study: Study, generation: int) -> list[FrozenTrial]:
            return [study._storage.get_trial(i) for i in self._completed.get(generation, ())]

        def get_parent_population(self, study: Study, generation: int) -> list[FrozenTrial]:
            if generation == 0:
                return []
            if generation in self._parents:
                return self._parents[generation]  # in the study's order, as Optuna's cache gives them
            parents = self.select_parent(study, generation)
            study._storage.set_study_system_attr(
                study._study_id, self._get_parent_cache_key_prefix() + str(generation),
                [t._trial_id for t in parents])
            self._parents[generation] = sorted(parents, key=lambda t: t.number)
            return parents  # the first time in the order of selection, as Optuna's own does

    # the generation is stored with each trial under the base class's key: keep it
    Indexed._GENERATION_KEY = base._GENERATION_KEY  # type: ignore[attr-defined]
    Indexed._PARENT_CACHE_KEY_PREFIX = base._PARENT_CACHE_KEY_PREFIX  # type: ignore[attr-defined]
    Indexed.__name__ = Indexed.__qualname__ = base.__name__
    Indexed.__signature__ = inspect.signature(base)  # type: ignore[attr-defined]  # the options it takes
    return Indexed


class CompletedIntersection:
    """Optuna's IntersectionSearchSpace (the parameters whose distribution is the same in every
    completed trial, sorted by name), narrowed as each trial completes instead of found by
    scanning the trials."""

    def __init__(self) -> None:
        self._space: dict[str, BaseDistribution] | None = None

    def add(self, distributions: dict[str, BaseDistribution]) -> None:
        if self._space is None:
            self._space = dict(sorted(distributions.items()))
        else:
            self._space = {name: d for name, d in self._space.items() if distributions.get(name) == d}

    def calculate(self, study: Study, use_cache: bool = False) -> dict[str, BaseDistribution]:
        return dict(self._space or {})  # a copy of the mapping: samplers never change a distribution


SAMPLER_CLASSES: dict[str, type[optuna.samplers.BaseSampler]] = {
    "nsga2": _indexed(optuna.samplers.NSGAIISampler),
    "nsga3": _indexed(optuna.samplers.NSGAIIISampler),
    "tpe": optuna.samplers.TPESampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "grid": optuna.samplers.RandomSampler,
    "lfbo": LFBOSampler,
}
RESERVED_OPTIONS = {"seed", "constraints_func", "search_space"}
# options a document may set: those whose annotation is made of plain scalar types
_SCALAR_ANNOTATION = re.compile(r"^(int|float|bool|str|None)( \| (int|float|bool|str|None))*$")
# they rank infeasible trials by their violation alone, so failures can be told as infeasible
CONSTRAINT_SAMPLERS = {"nsga2", "nsga3", "tpe", "lfbo"}
# Ranges Optuna checks only when it samples (n_ei_candidates: 0 fails, 2**40 allocates
# terabytes), inside the scheduling step, where a bad value would fail every step of the study
OPTION_RANGES: dict[str, tuple[float, float]] = {
    "n_startup_trials": (0, 100_000),
    "n_ei_candidates": (1, 10_000),
    "prior_weight": (0.0, 1e6),
    "population_size": (2, 10_000),
    "dividing_parameter": (1, 1_000),
}
MAX_REFERENCE_POINTS = 100_000  # NSGA-III enumerates C(objectives + p - 1, p) of them
_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,),
                                       "None": (type(None),)}


# What `auto` becomes: (sampler, options, whether numeric choices are shown in order when
# the document does not say: sampler.ordered_choices). Chosen by replaying recorded sweeps
# through the service, bench/results/gpu_gemm_replay_auto.md, gpu_gemm_cold_search.md and
# auto_enumerable.md; options a document gives with `auto` are laid over these.
AUTO_ENUMERABLE: tuple[str, dict[str, Any], bool] = ("lfbo", {}, False)  # any number of objectives
AUTO_MULTI_OBJECTIVE: tuple[str, dict[str, Any], bool] = ("nsga2", {"population_size": 6}, True)
AUTO_SINGLE_OBJECTIVE: tuple[str, dict[str, Any], bool] = ("tpe", {}, False)


def resolve(name: str, options: dict[str, Any], n_objectives: int,
            picks_lfbo: bool = False) -> tuple[str, dict[str, Any], bool]:
    """The sampler, options and ordered-choices default a study runs with: `auto` made
    concrete (`lfbo` where lfbo.auto_picks it, `picks_lfbo`); a named sampler sees categorical
    choices unordered unless the document asks."""
    if name != "auto":
        return name, dict(options), False
    if picks_lfbo:
        chosen, defaults, ordered = AUTO_ENUMERABLE
    else:
        chosen, defaults, ordered = AUTO_MULTI_OBJECTIVE if n_objectives > 1 else AUTO_SINGLE_OBJECTIVE
    return chosen, {**defaults, **options}, ordered



# Options Optuna takes as objects, named in a document by a string (the genetic samplers).
_GA = optuna.samplers.nsgaii
NAMED_OBJECT_OPTIONS: dict[str, dict[str, type]] = {
    "crossover": {"uniform": _GA.UniformCrossover, "blxalpha": _GA.BLXAlphaCrossover, "sbx": _GA.SBXCrossover,
                  "vsbx": _GA.VSBXCrossover, "spx": _GA.SPXCrossover, "undx": _GA.UNDXCrossover},
    # PolynomialMutation came with Optuna 5.0: a local change of a numeric value (an ordered
    # choice's index) instead of a fresh random value
    "mutation": {"polynomial": _GA.PolynomialMutation} if hasattr(_GA, "PolynomialMutation") else {},
}
_GENETIC = {"nsga2", "nsga3"}


def settable_options(name: str) -> dict[str, inspect.Parameter]:
    if name == "grid":
        return {}
    params = inspect.signature(SAMPLER_CLASSES[name]).parameters
    named = {k for k, kinds in NAMED_OBJECT_OPTIONS.items() if kinds} if name in _GENETIC else set()
    return {k: p.replace(annotation="str") if k in named else p for k, p in params.items()
            if k not in RESERVED_OPTIONS
            and (k in named or _SCALAR_ANNOTATION.match(str(p.annotation).strip("'\"")))}


def _type_problem(key: str, value: Any, annotation: str) -> str | None:
    names = [part.strip() for part in annotation.split("|")]
    accepted = tuple(t for part in names for t in _TYPES.get(part, ()))
    if not isinstance(value, accepted) or isinstance(value, bool) and "bool" not in names:
        return f"{key} must be {' or '.join(names)}, not {value!r}"
    return None


def _range_problem(key: str, value: Any, n_objectives: int) -> str | None:
    low, high = OPTION_RANGES.get(key, (-math.inf, math.inf))
    if isinstance(value, int | float) and not isinstance(value, bool) and not low <= value <= high:
        return f"{key} must be between {low:g} and {high:g}, not {value}"
    if key == "dividing_parameter" and isinstance(value, int):
        points = math.comb(n_objectives + value - 1, value)
        if points > MAX_REFERENCE_POINTS:
            return (f"dividing_parameter {value} makes {points:.3g} reference points for {n_objectives} "
                    f"objectives, over {MAX_REFERENCE_POINTS:,}; use a smaller one")
    return None


def build(name: str, seed: int | None, options: dict[str, Any], space: StructuredSpace | None = None,
          history: History | None = None) -> optuna.samplers.BaseSampler:
    """The sampler; `lfbo` scores the configurations of `space` (without one it samples at
    random: enough to check a document's options), learning from `history` too."""
    if name == "lfbo":
        return LFBOSampler(seed=seed, space=space, history=history, **options)
    objects = {k: NAMED_OBJECT_OPTIONS[k][v]() for k, v in options.items()
               if name in _GENETIC and k in NAMED_OBJECT_OPTIONS and isinstance(v, str)}
    return SAMPLER_CLASSES[name](seed=seed, **{**options, **objects})  # type: ignore[call-arg]


def check(name: str, seed: int | None, options: dict[str, Any], n_objectives: int = 1) -> None:
    """Refuse options the sampler does not take or of the wrong type, any it refuses when
    built (field: sampler.options.<key>, or sampler.options, with Optuna's own message), and
    values out of the ranges Optuna checks only when it samples."""
    if name == "compileiq":
        engine.check(seed, options, n_objectives)
        return
    allowed = settable_options(name)
    for key, value in options.items():
        if key not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise DocumentError(f"sampler.options.{key}", f"sampler {name!r} has no option {key!r}; it takes: {takes}")
        problem = _type_problem(key, value, str(allowed[key].annotation).strip("'\""))
        if problem:
            raise DocumentError(f"sampler.options.{key}", f"sampler {name!r}: {problem}")
        kinds = NAMED_OBJECT_OPTIONS.get(key) if name in _GENETIC else None
        if kinds is not None and value not in kinds:
            raise DocumentError(f"sampler.options.{key}",
                                f"sampler {name!r}: {key} must be one of {', '.join(kinds)}, not {value!r}")
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise DocumentError(
                "sampler.name", "sampler 'gp' needs PyTorch on the control plane; use nsga2, tpe or random"
            ) from exc
    try:
        build(name, seed, options)
    except Exception as exc:  # Optuna's own check of the values: say what it said
        field = f"sampler.options.{next(iter(options))}" if len(options) == 1 else "sampler.options"
        raise DocumentError(field, f"sampler {name!r} refused these options: {exc}") from exc
    for key, value in options.items():
        problem = _range_problem(key, value, n_objectives)
        if problem:
            raise DocumentError(f"sampler.options.{key}", f"sampler {name!r}: {problem}")
