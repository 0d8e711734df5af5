"""The samplers a study document names: built and checked as Optuna does, and the indexed
genetic samplers propose exactly what Optuna's own would."""

from __future__ import annotations

import math
import random
import time

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution

from service.domain.study_doc import DocumentError
from service.scheduling import samplers

SPACE = {"x": FloatDistribution(0, 1), "y": IntDistribution(1, 10)}


def zdt(params: dict) -> list[float]:
    g = 1 + (params["y"] - 1)
    return [params["x"], g * (1 - math.sqrt(params["x"] / g))]


def drive(sampler: optuna.samplers.BaseSampler, trials: int, in_flight: int, seed: int) -> list[dict]:
    """Ask and tell like a study with `in_flight` trials out at once, finishing in a random
    order, with some failures and some repeats told as failed."""
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    rng = random.Random(seed)
    running, asked = [], []
    while len(asked) < trials or running:
        while len(running) < in_flight and len(asked) < trials:
            trial = study.ask(SPACE)
            running.append(trial)
            asked.append(dict(trial.params))
        trial = running.pop(rng.randrange(len(running)))
        if rng.random() < 0.1:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, zdt(trial.params))
    return asked


@pytest.mark.parametrize("name", ["nsga2", "nsga3"])
def test_indexed_genetic_samplers_propose_what_optunas_own_propose(name: str) -> None:
    own = {"nsga2": optuna.samplers.NSGAIISampler, "nsga3": optuna.samplers.NSGAIIISampler}[name]
    options = {"population_size": 10, "seed": 5}
    expected = drive(own(**options), 400, in_flight=7, seed=1)
    got = drive(samplers.build(name, 5, {"population_size": 10}), 400, in_flight=7, seed=1)
    assert got == expected


def test_indexed_ask_does_not_grow_with_the_study() -> None:
    study = optuna.create_study(directions=["minimize", "minimize"],
                                sampler=samplers.build("nsga2", 1, {"population_size": 20}))

    def batch(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            trial = study.ask(SPACE)
            study.tell(trial, zdt(trial.params))
        return time.perf_counter() - started

    batch(300)
    early = min(batch(100) for _ in range(3))
    batch(4000)
    late = min(batch(100) for _ in range(3))
    assert late < 3 * early, (early, late)  # Optuna's own scan makes this about 8x


def test_options_are_checked_by_building_the_sampler() -> None:
    with pytest.raises(DocumentError) as refused:
        samplers.check("nsga2", 1, {"population_size": 1})
    assert refused.value.field == "sampler.options.population_size"
    assert "greater than or equal to 2" in refused.value.message
    with pytest.raises(DocumentError) as unknown:
        samplers.check("tpe", 1, {"mutation": "x"})
    assert "has no option 'mutation'" in unknown.value.message
    with pytest.raises(DocumentError):
        samplers.check("nsga2", 1, {"crossover": "blx"})  # takes an object, not a document value
    samplers.check("nsga2", 1, {"population_size": 8, "crossover_prob": 0.5})
