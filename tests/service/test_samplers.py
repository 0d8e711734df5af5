"""The samplers a study document names: built and checked as Optuna does, and the indexed
genetic samplers propose exactly what Optuna's own would."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution

from service.scheduling import samplers
from service.studies.document import DocumentError

SPACE = {"x": FloatDistribution(0, 1), "y": IntDistribution(1, 10)}
# some trials asked with one more parameter and one narrower: the search space the sampler
# infers is what every completed trial has in common
WIDER = {"x": FloatDistribution(0, 1), "y": IntDistribution(1, 5), "z": IntDistribution(0, 3)}


def zdt(params: dict) -> list[float]:
    g = 1 + (params["y"] - 1)
    return [params["x"], g * (1 - math.sqrt(params["x"] / g))]


def drive(sampler: optuna.samplers.BaseSampler, trials: int, in_flight: int, seed: int,
          wider_from: int | None = None) -> list[dict]:
    """Ask and tell like a study with `in_flight` trials out at once, finishing in a random
    order, with some failures and some repeats told as failed; from trial `wider_from` on,
    one in five is asked in WIDER."""
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    rng = random.Random(seed)
    running, asked = [], []
    while len(asked) < trials or running:
        while len(running) < in_flight and len(asked) < trials:
            wider = wider_from is not None and len(asked) >= wider_from and rng.random() < 0.2
            trial = study.ask(WIDER if wider else SPACE)
            running.append(trial)
            asked.append(dict(trial.params))
        trial = running.pop(rng.randrange(len(running)))
        if rng.random() < 0.1:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, zdt(trial.params))
    return asked


@pytest.mark.parametrize("name", ["nsga2", "nsga3"])
@pytest.mark.parametrize(("in_flight", "wider_from"), [(7, None), (60, None), (7, 150)])
def test_indexed_genetic_samplers_propose_what_optunas_own_propose(name: str, in_flight: int,
                                                                   wider_from: int | None) -> None:
    own = {"nsga2": optuna.samplers.NSGAIISampler, "nsga3": optuna.samplers.NSGAIIISampler}[name]
    options = {"population_size": 10, "seed": 5}
    expected = drive(own(**options), 400, in_flight=in_flight, seed=1, wider_from=wider_from)
    got = drive(samplers.build(name, 5, {"population_size": 10}), 400, in_flight=in_flight, seed=1,
                wider_from=wider_from)
    assert got == expected
    if wider_from is not None:  # WIDER narrowed y: the space the sampler infers lost it
        assert any("z" in params for params in got)


def trials_read_per_ask(sampler: optuna.samplers.BaseSampler) -> tuple[float, float]:
    """Trials the study's storage hands out per ask and tell (its scans of all trials), over
    100 trials after 300 and over 100 after 2,000."""
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    storage, read = study._storage, [0]
    scan = storage.get_all_trials

    def counted(*args: Any, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        trials = scan(*args, **kwargs)
        read[0] += len(trials)
        return trials

    storage.get_all_trials = counted  # type: ignore[method-assign]

    def per_trial(n: int) -> float:
        before = read[0]
        for _ in range(n):
            trial = study.ask(SPACE)
            study.tell(trial, zdt(trial.params))
        return (read[0] - before) / n

    per_trial(300)
    early = per_trial(100)
    per_trial(1600)
    return early, per_trial(100)


def test_indexed_ask_does_not_grow_with_the_study() -> None:
    early, late = trials_read_per_ask(samplers.build("nsga2", 1, {"population_size": 20}))
    assert late <= early + 1, (early, late)
    own_early, own_late = trials_read_per_ask(optuna.samplers.NSGAIISampler(population_size=20, seed=1))
    assert own_late > 4 * own_early, (own_early, own_late)  # Optuna's own scan, which the count sees


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
