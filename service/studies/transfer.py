"""Transfer (warm_start: related): which configurations measured by related studies a new
study measures first, right after its baseline. Pure: the caller (service.studies.warm_start)
finds the related trials; nothing here reads the database.

The one mechanism: the best configurations per nearest shape, enqueued first.

- A related trial is a completed trial of a related study (same kernel, same space; see
  warm_start.related for which studies a caller may start from).
- Its distance to the new study is that of the workloads (`shape_distance`: each workload's
  dims as log2 of their weighted geometric mean over its shapes, Euclidean, a dim one
  workload names and the other does not counting MISSING_DIM) plus that of the targets
  (`target_distance`: another device model DEVICE, each differing toolchain version
  TOOLCHAIN_STEP times its wire.targets weight).
- Within its study, a trial is ranked front first (the members of that study's front, then
  the others), each part by the new study's first objective; its score is its distance plus
  RANK_STEP times its rank. The study starts from the RELATED_TRIALS
  configurations of lowest score, none twice, none it measures anyway (its baseline, the
  configurations it lists). With RANK_STEP 1 a study one doubling of the shape farther
  off gives its best where the nearest gives its second best.
- A trial farther off than MAX_DISTANCE is not taken: its best configurations say little
  about the new shape, and measuring them first delays and misleads the search. (The GEMM's
  decode shape, M=64, lies 6.2 from the square 4096^3 and 7.1 from prefill; started from
  them, its replay reached 2% of the best in a median of 36.5 trials, cold in 19:
  bench/results/transfer_replay.md.) A study with no related trial that near starts cold.

Their values are not told to the sampler (they were measured on another shape or target, on
another scale): the configurations are measured again and the sampler hears those
measurements like any other; the values are kept to show what the study started from.

The `lfbo` sampler also learns from related trials, near or far (`learning_set`): each related
study's completed trials, ordered best first among themselves (by Pareto rank over the
objectives both studies have, service.domain.pareto.best_first), join the sampler's own
trials in its classifier, described by the kernel's structure model at their own shape (by
their own numbers where the kernel has none), each
weighing 2**-distance of one of the study's own (service.scheduling.lfbo.History), so that
what makes a configuration good at any shape (pipeline depth, registers) can carry over
from the first ask, while the study's own trials outweigh the rest as they come. Up to
LEARNED_STUDIES studies, the nearest first, and LEARNED_TRIALS trials in all. Only ranks
are used, never values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain import pareto
from wire.contract import WorkloadShape
from wire.targets import WEIGHTS

RELATED_TRIALS = 4
LEARNED_STUDIES = 8
LEARNED_TRIALS = 1000
RANK_STEP = 1.0
MAX_DISTANCE = 4.0  # 16x in one dim, or another device and 4x in one dim
MISSING_DIM = 4.0
DEVICE = 2.0
TOOLCHAIN_STEP = 0.25
DEVICE_FIELDS = ("gpu", "cpu", "machine")


@dataclass(frozen=True)
class RelatedTrial:
    study: int
    number: int
    team: bool  # of the new study's team (else shared by its owners)
    workload: list[WorkloadShape]
    target: dict[str, str | None]  # service.artifacts.catalog.worker_target of the worker that measured it
    config: dict[str, Any]
    values: dict[str, float]
    on_front: bool  # a member of its study's front


@dataclass(frozen=True)
class Pick:
    trial: RelatedTrial
    distance: float  # shape and target distance
    score: float  # distance + RANK_STEP * rank in its study


def shape_features(workload: Sequence[WorkloadShape]) -> dict[str, float]:
    """Each dim as log2 of its weighted geometric mean over the workload's shapes that name it."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    for shape in workload:
        for name, value in shape.dims.items():
            if value > 0:
                sums[name] = sums.get(name, 0.0) + shape.weight * math.log2(value)
                weights[name] = weights.get(name, 0.0) + shape.weight
    return {name: sums[name] / weights[name] for name in sums if weights[name] > 0}


def shape_distance(a: Sequence[WorkloadShape], b: Sequence[WorkloadShape]) -> float:
    fa, fb = shape_features(a), shape_features(b)
    squares = sum((fa[n] - fb[n]) ** 2 if n in fa and n in fb else MISSING_DIM ** 2 for n in fa.keys() | fb.keys())
    return math.sqrt(squares)


def target_distance(here: dict[str, str | None], there: dict[str, str | None]) -> float:
    """DEVICE when a device field both know differs, plus TOOLCHAIN_STEP per weight of each
    toolchain version both know that differs (a field either side does not know is not held
    against a trial)."""
    def differs(name: str) -> bool:
        return here.get(name) is not None and there.get(name) is not None and here[name] != there[name]

    device = DEVICE if any(differs(name) for name in DEVICE_FIELDS) else 0.0
    return device + TOOLCHAIN_STEP * sum(weight for name, weight in WEIGHTS.items() if differs(name))


def pick(trials: Iterable[RelatedTrial], workload: Sequence[WorkloadShape], target: dict[str, str | None],
         first_objective: str, minimize: bool, skip: Iterable[dict[str, Any]], count: int = RELATED_TRIALS,
         ) -> list[Pick]:
    """The `count` configurations of lowest score within MAX_DISTANCE, as described above; ties go to the nearer
    trial, then the lower study id and trial number (the order is the same on every replica)."""
    by_study: dict[int, list[RelatedTrial]] = {}
    for trial in trials:
        if first_objective in trial.values:
            by_study.setdefault(trial.study, []).append(trial)
    scored: list[tuple[tuple[float, float, int, int], Pick]] = []
    sign = 1.0 if minimize else -1.0
    for study_trials in by_study.values():
        study_trials.sort(key=lambda t: (not t.on_front, sign * t.values[first_objective], t.number))
        shape = shape_distance(workload, study_trials[0].workload)
        for rank, trial in enumerate(study_trials):
            distance = shape + target_distance(target, trial.target)
            if distance > MAX_DISTANCE:
                continue
            score = distance + RANK_STEP * rank
            scored.append(((score, distance, trial.study, trial.number), Pick(trial, distance, score)))
    scored.sort(key=lambda item: item[0])
    taken = {config_key(config) for config in skip}
    picks: list[Pick] = []
    for _, candidate in scored:
        if len(picks) == count:
            break
        key = config_key(candidate.trial.config)
        if key not in taken:
            taken.add(key)
            picks.append(candidate)
    return picks


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@dataclass(frozen=True)
class Learned:
    """A related study's trials for the sampler to learn from."""

    study: int
    team: bool
    workload: list[WorkloadShape]
    target: dict[str, str | None]
    distance: float
    configs: list[dict[str, Any]]  # best first


def learning_set(trials: Iterable[RelatedTrial], workload: Sequence[WorkloadShape], target: dict[str, str | None],
                 objectives: Sequence[tuple[str, bool]]) -> list[Learned]:
    """The related studies the sampler learns from, nearest first (ties: the lower study id),
    each with its trials that measured every one of the new study's `objectives` (name,
    minimise) it measured at all, best first; at most LEARNED_STUDIES studies and
    LEARNED_TRIALS trials (a study that would pass it gives its best ones). A study that
    measured none of the objectives, or fewer than two trials, teaches nothing."""
    by_study: dict[int, list[RelatedTrial]] = {}
    for trial in trials:
        by_study.setdefault(trial.study, []).append(trial)
    placed = []  # (distance, study id, its usual target, its trials)
    for study_trials in by_study.values():
        usual = _usual_target(study_trials)
        distance = shape_distance(workload, study_trials[0].workload) + target_distance(target, usual)
        placed.append((distance, study_trials[0].study, usual, study_trials))
    placed.sort(key=lambda p: p[:2])
    sign = {name: 1.0 if minimize else -1.0 for name, minimize in objectives}
    learned: list[Learned] = []
    room = LEARNED_TRIALS
    for distance, _, usual, study_trials in placed:
        if len(learned) == LEARNED_STUDIES or room < 2:
            break
        measured = [name for name, _ in objectives if all(name in t.values for t in study_trials)]
        if not measured or len(study_trials) < 2:
            continue
        order = pareto.best_first([[sign[n] * float(t.values[n]) for n in measured] for t in study_trials])
        first = study_trials[0]
        learned.append(Learned(study=first.study, team=first.team, workload=first.workload, target=usual,
                               distance=distance, configs=[study_trials[i].config for i in order[:room]]))
        room -= len(learned[-1].configs)
    return learned


def _usual_target(trials: Sequence[RelatedTrial]) -> dict[str, str | None]:
    """The target most of a study's trials were measured on (ties: the first seen)."""
    keys = [json.dumps(t.target, sort_keys=True) for t in trials]
    usual = max(dict.fromkeys(keys), key=keys.count)
    return trials[keys.index(usual)].target
