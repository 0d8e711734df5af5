"""The `lfbo` sampler: it proposes configurations of its space, never one the study has, orders
its first proposals by the structure model's prior, learns from what it measures, keeps away
from what could not launch, and proposes the same configurations for the same seed. Its
labels and its logistic regression are checked against independent computations."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from scipy.optimize import minimize

from service.scheduling import lfbo, samplers
from service.studies.document import DocumentError
from wire.contract import WorkloadShape
from wire.kernels.structure import Structure

SPACE = {"a": IntDistribution(0, 5), "b": CategoricalDistribution((1, 2, 4, 8, 16, 32)), "c": IntDistribution(0, 5)}
GRID = [dict(zip(sorted(SPACE), v, strict=True)) for v in itertools.product(range(6), (1, 2, 4, 8, 16, 32), range(6))]


def runtime(p: dict[str, Any]) -> float:
    """Best at a=4, b=8, c=1; each parameter's distance from it costs, b's the most."""
    return 1.0 + 0.3 * abs(p["a"] - 4) + 0.5 * abs(math.log2(p["b"]) - 3) + 0.2 * abs(p["c"] - 1)


def described(prior: Any = lambda p: 0.0) -> lfbo.StructuredSpace:
    return lfbo.StructuredSpace(SPACE, lambda p: Structure([float(p["a"]), math.log2(p["b"]), float(p["c"])],
                                                           prior(p)))


def drive(sampler: optuna.samplers.BaseSampler, trials: int, infeasible: Any = lambda p: False,
          in_flight: int = 2, seed: int = 0, measure: Any = runtime) -> list[dict[str, Any]]:
    """Ask and tell like the service: `in_flight` trials out, finishing in a random order; a
    configuration that cannot launch is told complete with the worst values and its
    `resources` constraint violated, as the mirror tells it."""
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    rng = random.Random(seed)
    running: list[optuna.Trial] = []
    asked: list[dict[str, Any]] = []
    while len(asked) < trials or running:
        while len(running) < in_flight and len(asked) < trials:
            trial = study.ask(SPACE)
            asked.append(dict(trial.params))
            running.append(trial)
        trial = running.pop(rng.randrange(len(running)))
        failed = infeasible(trial.params)
        study._storage.set_trial_system_attr(trial._trial_id, "constraints:resources", 1.0 if failed else 0.0)
        value = 10.0 if failed else measure(trial.params)
        study.tell(trial, [value, 2 * value])
    return asked


def first_to_best(asked: list[dict[str, Any]]) -> int:
    best = min(runtime(p) for p in GRID)
    return next(i for i, p in enumerate(asked, start=1) if runtime(p) == best)


def test_it_proposes_every_configuration_once_then_nothing() -> None:
    sampler = samplers.build("lfbo", 3, {}, described())
    asked = drive(sampler, len(GRID))
    assert sorted(map(str, asked)) == sorted(map(str, GRID))  # each configuration once, all of them
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for p in GRID:
        study.add_trial(optuna.trial.create_trial(params=p, distributions=SPACE, values=[1.0, 1.0]))
    trial = study.ask()
    assert sampler.sample_relative(study, study._storage.get_trial(trial._trial_id), SPACE) == {}


def test_the_prior_orders_the_first_proposals() -> None:
    def prior(p: dict[str, Any]) -> float:
        return -abs(p["a"] - 2) - abs(p["c"] - 5)

    asked = drive(samplers.build("lfbo", 1, {}, described(prior)), 1, in_flight=1)
    assert prior(asked[0]) == max(prior(p) for p in GRID)
    # six configurations share the best prior: which of them comes first depends on the seed
    firsts = {str(drive(samplers.build("lfbo", seed, {}, described(prior)), 1)[0]) for seed in range(12)}
    assert len(firsts) > 1
    assert all(prior(eval(f)) == 0 for f in firsts)  # noqa: S307  # our own repr of a dict of ints


def test_it_learns_where_the_best_are_without_a_prior() -> None:
    learned = [first_to_best(drive(samplers.build("lfbo", s, {}, described()), 216, seed=s)) for s in range(10)]
    # without repeats, in a random order, the one best of 216 comes 108.5th on average
    assert statistics.median(learned) < 108.5 / 3, learned


def test_it_never_proposes_again_what_could_not_launch_nor_learns_from_its_values() -> None:
    def infeasible(p: dict[str, Any]) -> bool:
        return p["b"] == 8 and p["c"] >= 3  # near the best

    asked = drive(samplers.build("lfbo", 7, {}, described()), 150, infeasible)
    assert len({str(p) for p in asked}) == len(asked)
    feasible = [p for p in GRID if not infeasible(p)]
    assert first_to_best(asked) <= 60
    assert min(runtime(p) for p in asked if not infeasible(p)) == min(runtime(p) for p in feasible)


def test_it_learns_where_configurations_cannot_launch() -> None:
    def infeasible(p: dict[str, Any]) -> bool:
        return p["c"] >= 3  # half the space

    # every configuration that launches measures the same: only what failed tells them apart
    shares = [sum(map(infeasible, drive(samplers.build("lfbo", s, {}, described()), 60, infeasible, seed=s,
                                        measure=lambda p: 1.0))) / 60 for s in range(5)]
    assert statistics.mean(shares) < 0.35, shares  # in a random order, half would


def test_the_same_seed_proposes_the_same_configurations() -> None:
    def run(seed: int) -> list[dict[str, Any]]:
        return drive(samplers.build("lfbo", seed, {"gamma": 0.3}, described()), 40, in_flight=1)

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_labels_are_the_best_share_by_pareto_rank() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 6, size=(40, 2)).astype(float).tolist()

    def dominated(i: int, among: list[int]) -> bool:
        return any(all(values[j][k] <= values[i][k] for k in range(2)) and values[j] != values[i] for j in among)

    ranks, left, level = {}, list(range(40)), 0
    while left:  # peel fronts off one by one
        front = [i for i in left if not dominated(i, left)]
        ranks.update(dict.fromkeys(front, level))
        left = [i for i in left if i not in front]
        level += 1
    labels = lfbo.best_share(values, 0.25)
    assert labels.sum() == 10
    chosen = [i for i in range(40) if labels[i]]
    assert max(ranks[i] for i in chosen) <= min(ranks[i] for i in range(40) if not labels[i])


def test_the_logistic_regression_minimises_its_penalised_likelihood() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 4))
    y = (x[:, 0] - x[:, 2] + rng.normal(size=30) > 0).astype(float)
    offset = rng.normal(size=30)

    def loss(w: np.ndarray) -> float:
        z = x @ w[:-1] + w[-1] + offset
        return float(np.sum(np.logaddexp(0, z) - y * z) + 0.5 * 2.0 * np.sum(w[:-1] ** 2) + 0.5 * 1e-6 * w[-1] ** 2)

    reference = minimize(loss, np.zeros(5), method="BFGS", options={"gtol": 1e-9}).x
    assert np.allclose(lfbo.logistic(x, y, offset, 2.0), reference, atol=1e-4)


def test_the_weighted_regression_minimises_its_weighted_penalised_likelihood() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(30, 3))
    y = (x[:, 1] + rng.normal(size=30) > 0).astype(float)
    offset, weight = rng.normal(size=30), rng.uniform(0.01, 2.0, size=30)

    def loss(w: np.ndarray) -> float:
        z = x @ w[:-1] + w[-1] + offset
        return float(np.sum(weight * (np.logaddexp(0, z) - y * z)) + 0.5 * np.sum(w[:-1] ** 2)
                     + 0.5 * 1e-6 * w[-1] ** 2)

    reference = minimize(loss, np.zeros(4), method="BFGS", options={"gtol": 1e-9}).x
    assert np.allclose(lfbo.logistic(x, y, offset, 1.0, weight), reference, atol=1e-4)


def learned_from(best_b: int, distance: float, space: lfbo.StructuredSpace) -> lfbo.History | None:
    """A related study of 36 trials whose best half all have b = best_b."""
    configs = [{"a": a, "b": b, "c": 0} for b in (best_b, 1) for a in range(6) for _ in range(3)]
    ordered = sorted(configs, key=lambda c: c["b"] != best_b)
    return lfbo.history(space, lambda c: c, lambda p: p, "cpu", None,
                        [([WorkloadShape(dims={"n": 1})], distance, ordered)])


def test_related_trials_steer_the_first_proposals_by_their_distance() -> None:
    """The prior prefers b = 1 (by 2 logits over b = 32). A related study whose best trials have
    b = 32 turns the first proposals, made before anything is measured, to b = 32 when it is
    near; 12 doublings away it weighs 2**-12 of a trial of the study's own and leaves them to
    the prior."""
    space = described(lambda p: -0.2 * math.log2(p["b"]))

    def first_b(history: lfbo.History | None) -> list[int]:
        return [p["b"] for seed in range(10)
                for p in drive(samplers.build("lfbo", seed, {}, space, history), 2, seed=seed)]

    assert first_b(None) == [1] * 20
    assert first_b(learned_from(32, 0.0, space)) == [32] * 20
    assert first_b(learned_from(32, 12.0, space)) == [1] * 20


def test_history_labels_each_related_study_on_its_own() -> None:
    two = lfbo.History(np.zeros((12, 1)), np.zeros(12), [(0, i) for i in range(8)] + [(1, i) for i in range(4)],
                       np.ones(12))
    # gamma 0.25: the best 2 of the first study's 8, the best 1 of the second's 4
    assert two.labels(0.25).tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]


def test_a_space_is_described_by_the_builtins_structure_model_over_its_shapes() -> None:
    view = {"BLOCK_M": CategoricalDistribution((64, 128)), "BLOCK_N": CategoricalDistribution((64, 256)),
            "num_warps": CategoricalDistribution((4, 8))}

    def best(space: lfbo.StructuredSpace) -> dict[str, Any]:
        return space.points[int(np.argmax(space.prior))]

    square = [WorkloadShape(dims={"m": 4096, "n": 4096, "k": 4096})]
    # the largest tile whose accumulators fit in its threads' registers: 8 warps for 128 x 256
    assert best(lfbo.structured_space(view, dict, "triton", "gemm_bf16", square)) == {
        "BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8}
    decode = [WorkloadShape(dims={"m": 64, "n": 8192, "k": 8192})]
    # 128 CTAs of 64 x 64 fill the GPU where larger tiles leave SMs idle or compute padding
    assert {k: best(lfbo.structured_space(view, dict, "triton", "gemm_bf16", decode))[k]
            for k in ("BLOCK_M", "BLOCK_N")} == {"BLOCK_M": 64, "BLOCK_N": 64}
    # a kernel without a structure model, or shapes its model cannot read: no prior
    unread = lfbo.structured_space(view, dict, "triton", "gemm_bf16", [WorkloadShape(dims={"rows": 8})])
    assert not unread.prior.any()
    assert not lfbo.structured_space(view, dict, "cpu", "matmul", []).prior.any()


@pytest.mark.parametrize(("options", "field"), [({"gamma": 1.0}, "gamma"), ({"l2": 0.0}, "l2"),
                                                 ({"prior_scale": -1.0}, "prior_scale"), ({"beta": 1}, "beta")])
def test_options_out_of_range_are_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(DocumentError, match=field):
        samplers.check("lfbo", 1, options)


def test_without_a_space_it_samples_at_random() -> None:
    def run(seed: int) -> list[dict[str, Any]]:
        study = optuna.create_study(sampler=samplers.build("lfbo", seed, {}))
        for _ in range(8):
            study.tell(study.ask(SPACE), 1.0)
        return [t.params for t in study.trials]

    assert all(p in GRID for p in run(2))
    assert run(2) != run(3)
