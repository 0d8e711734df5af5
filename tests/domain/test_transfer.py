"""Transfer on its own (service.studies.transfer): distances, the order in which related trials
are picked and the related studies the sampler learns from, against values worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest

from service.studies.transfer import (
    DEVICE,
    LEARNED_STUDIES,
    LEARNED_TRIALS,
    MAX_DISTANCE,
    RelatedTrial,
    learning_set,
    pick,
    shape_distance,
    shape_features,
    target_distance,
)
from wire.contract import WorkloadShape


def shapes(*dims: dict[str, int], weights: tuple[float, ...] = ()) -> list[WorkloadShape]:
    return [WorkloadShape(dims=d, weight=weights[i] if weights else 1.0) for i, d in enumerate(dims)]


def test_shape_features_are_weighted_geometric_means() -> None:
    # log2 of 64 and 256 weighted 3:1 -> (3 * 6 + 8) / 4 = 6.5
    assert shape_features(shapes({"n": 64}, {"n": 256}, weights=(3.0, 1.0))) == {"n": 6.5}
    # a dim one shape lacks is averaged over the shapes that name it
    assert shape_features(shapes({"n": 64, "m": 8}, {"n": 16})) == {"n": 5.0, "m": 3.0}


def test_shape_distance() -> None:
    assert shape_distance(shapes({"n": 64}), shapes({"n": 64})) == 0.0
    assert shape_distance(shapes({"n": 64}), shapes({"n": 256})) == 2.0
    # (log2 4096 - log2 64)^2 + (log2 8192 - log2 8192)^2 -> 6
    assert shape_distance(shapes({"m": 64, "n": 8192}), shapes({"m": 4096, "n": 8192})) == 6.0
    # a dim only one names: MISSING_DIM (4)
    assert shape_distance(shapes({"n": 64}), shapes({"n": 64, "k": 2})) == 4.0
    assert math.isclose(shape_distance(shapes({"n": 32}), shapes({"n": 64, "k": 2})), math.sqrt(1 + 16))


def test_target_distance() -> None:
    here = {"gpu": "H200", "triton": "3.5", "cuda": "13.0", "cc": None}
    assert target_distance(here, {"gpu": "H200", "triton": "3.5", "cuda": "13.0"}) == 0.0
    assert target_distance(here, {"gpu": "H100", "triton": "3.5", "cuda": "13.0"}) == DEVICE
    # a compiler weighs 2, CUDA 1, each times 0.25
    assert target_distance(here, {"gpu": "H200", "triton": "3.4", "cuda": "12.8"}) == 0.75
    # what either side does not know is not held against it
    assert target_distance(here, {"gpu": None, "cc": "gcc 13"}) == 0.0


def trial(study: int, number: int, n: int, runtime: float, *, front: bool = False, gpu: str = "H200",
          config: dict[str, Any] | None = None) -> RelatedTrial:
    return RelatedTrial(study=study, number=number, team=True, workload=shapes({"n": n}), target={"gpu": gpu},
                        config=config or {"s": study, "t": number}, values={"runtime_ms": runtime}, on_front=front)


def test_nearest_shape_first_front_first_then_by_the_first_objective() -> None:
    near = [trial(1, 5, 64, 2.0), trial(1, 6, 64, 1.0), trial(1, 7, 64, 3.0, front=True), trial(1, 8, 64, 4.0)]
    far = [trial(2, 1, 1024, 0.5), trial(2, 2, 1024, 0.6)]  # distance 3 from n=128
    picked = pick([*far, *near], shapes({"n": 128}), {"gpu": "H200"}, "runtime_ms", True, skip=[])
    # study 1 (distance 1): its front member first, then 1.0, 2.0, 4.0 -> scores 1, 2, 3, 4;
    # study 2 (distance 3): 0.5, 0.6 -> scores 3, 4; a tie goes to the nearer study
    assert [(p.trial.study, p.trial.number) for p in picked] == [(1, 7), (1, 6), (1, 5), (2, 1)]
    assert [p.score for p in picked] == [1.0, 2.0, 3.0, 3.0]
    assert [p.distance for p in picked] == [1.0, 1.0, 1.0, 3.0]


def test_maximised_objectives_rank_the_largest_first_and_another_device_is_farther() -> None:
    same = [trial(1, 1, 64, 10.0), trial(1, 2, 64, 30.0)]
    other_gpu = [trial(2, 1, 64, 99.0, gpu="MI300")]  # distance DEVICE = 2
    picked = pick([*same, *other_gpu], shapes({"n": 64}), {"gpu": "H200"}, "runtime_ms", False, skip=[], count=3)
    assert [(p.trial.study, p.trial.number) for p in picked] == [(1, 2), (1, 1), (2, 1)]


def test_repeats_the_skipped_and_trials_without_the_objective_are_left_out() -> None:
    shared = {"TILE": 8}
    trials = [trial(1, 1, 64, 1.0, config=shared), trial(2, 1, 32, 1.0, config=dict(shared)),
              trial(1, 2, 64, 2.0, config={"TILE": 16}), trial(1, 3, 64, 3.0, config={"TILE": 32}),
              RelatedTrial(study=1, number=4, team=True, workload=shapes({"n": 64}), target={},
                           config={"TILE": 64}, values={"p99_ms": 0.1}, on_front=True)]
    picked = pick(trials, shapes({"n": 64}), {}, "runtime_ms", True, skip=[{"TILE": 16}], count=5)
    assert [p.trial.config for p in picked] == [{"TILE": 8}, {"TILE": 32}]


@pytest.mark.parametrize("count", [0, 1])
def test_count(count: int) -> None:
    picked = pick([trial(1, 1, 64, 1.0), trial(1, 2, 64, 2.0)], shapes({"n": 64}), {}, "runtime_ms", True, [],
                  count=count)
    assert len(picked) == count


def test_trials_farther_than_the_cut_off_are_not_taken() -> None:
    """Decode M=64 from square 4096 (log2 ratio 6 in m): nothing taken, the study starts cold;
    exactly at the cut-off still counts, and on another device only nearer shapes do."""
    square = [trial(1, 1, 4096, 1.0, front=True), trial(1, 2, 4096, 2.0)]
    assert MAX_DISTANCE == 4.0
    assert pick(square, shapes({"n": 64}), {"gpu": "H200"}, "runtime_ms", True, skip=[]) == []
    at_cut = [trial(2, 1, 1024, 1.0)]  # log2(1024/64) = 4
    assert [p.distance for p in pick(at_cut, shapes({"n": 64}), {}, "runtime_ms", True, skip=[])] == [4.0]
    # another GPU (2) and a shape 4x away (2): 4, taken; 8x away (3 + 2): not
    elsewhere = [trial(3, 1, 256, 1.0, gpu="MI300"), trial(4, 1, 512, 1.0, gpu="MI300")]
    picked = pick(elsewhere, shapes({"n": 64}), {"gpu": "H200"}, "runtime_ms", True, skip=[])
    assert [(p.trial.study, p.distance) for p in picked] == [(3, 4.0)]


def two_objective(study: int, number: int, n: int, runtime: float, energy: float, gpu: str = "H200") -> RelatedTrial:
    return RelatedTrial(study=study, number=number, team=True, workload=shapes({"n": n}), target={"gpu": gpu},
                        config={"s": study, "t": number}, values={"runtime_ms": runtime, "energy_mj": energy},
                        on_front=False)


def test_the_learning_set_takes_every_study_nearest_first_each_best_first() -> None:
    """Far studies are kept (they weigh less, service.scheduling.lfbo.History); within a study
    the trials go by Pareto rank, then by mean rank per objective (worked out by hand)."""
    far = [two_objective(1, 1, 4096, 1.0, 9.0), two_objective(1, 2, 4096, 2.0, 1.0)]  # distance 6
    near = [two_objective(2, 1, 128, 3.0, 3.0),  # dominated by 2: rank 1
            two_objective(2, 2, 128, 2.0, 2.0),  # front, mean rank (1 + 1) / 2 = 1
            two_objective(2, 3, 128, 1.0, 4.0),  # front, mean rank (0 + 3) / 2 = 1.5
            two_objective(2, 4, 128, 4.0, 0.5)]  # front, mean rank (3 + 0) / 2 = 1.5, then by index
    other_gpu = [two_objective(3, 1, 64, 1.0, 1.0, gpu="MI300"), two_objective(3, 2, 64, 2.0, 2.0, gpu="MI300")]
    learned = learning_set([*far, *near, *other_gpu], shapes({"n": 64}), {"gpu": "H200"},
                           [("runtime_ms", True), ("energy_mj", True)])
    assert [(s.study, s.distance) for s in learned] == [(2, 1.0), (3, DEVICE), (1, 6.0)]
    assert [c["t"] for c in learned[0].configs] == [2, 3, 4, 1]
    # an objective maximised ranks the largest first
    assert [c["t"] for c in learning_set(far, shapes({"n": 64}), {}, [("energy_mj", True)])[0].configs] == [2, 1]
    assert [c["t"] for c in learning_set(far, shapes({"n": 64}), {}, [("energy_mj", False)])[0].configs] == [1, 2]


def test_the_learning_set_is_bounded_and_skips_what_cannot_teach() -> None:
    one = [two_objective(1, 1, 64, 1.0, 1.0)]  # a single trial ranks nothing
    other = [RelatedTrial(study=2, number=n, team=True, workload=shapes({"n": 64}), target={}, config={"n": n},
                          values={"p99_ms": 1.0}, on_front=False) for n in range(3)]  # none of the objectives
    assert learning_set([*one, *other], shapes({"n": 64}), {}, [("runtime_ms", True)]) == []
    many = [two_objective(s, n, 64 * 2 ** s, float(n), float(n)) for s in range(LEARNED_STUDIES + 2) for n in range(3)]
    assert len(learning_set(many, shapes({"n": 64}), {}, [("runtime_ms", True)])) == LEARNED_STUDIES
    big = [two_objective(s, n, 64 * 2 ** s, float(n), 1.0) for s in range(2) for n in range(LEARNED_TRIALS)]
    learned = learning_set(big, shapes({"n": 64}), {}, [("runtime_ms", True)])
    assert [len(s.configs) for s in learned] == [LEARNED_TRIALS]
