"""Replay a recorded sweep against a sampler without the service: a quick screen before the
replay through the service (replay_service.py), which is the one that counts.

What it keeps of the service's rules (mode `after` of replay_service.py): the baseline first;
two trials in flight; a configuration that failed in the sweep is told at once as infeasible
(complete, the worst values seen, the `resources` constraint violated) and does not count
against the budget; a repeat is told failed and asked again (the sampler's own view of the
space, ordered choices or not, as the setting says). Noise and the success rule are the
replay's: values times 1 + N(0, sigma), sigma from the kernel's recorded repeats; reached at
the first counted trial after which the best observed runtime is a configuration within 2% of
the sweep's best.

    python bench/gpu/replay_offline.py --settings surrogate,auto --seeds 20 [--kernel K --sweep S --dims SHAPE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from bench.gpu.replay_service import (  # noqa: E402
    OBJECTIVES,
    SETTINGS,
    SWEEP,
    TRIALS,
    WITHIN,
    config_key,
    load_sweep,
    noise_sigmas,
)
from bench.gpu.surrogate_experiment import SurrogateSampler  # noqa: E402
from service.scheduling import lfbo, samplers  # noqa: E402
from service.studies.space import SearchSpace  # noqa: E402
from wire.contract import WorkloadShape  # noqa: E402
from wire.kernels import all_builtins  # noqa: E402

MAX_REASKS = 20


def one_study(kernel: str, sweep_path: Path, setting: dict[str, Any], seed: int, objectives: list[str],
              trials: int = TRIALS, parallelism: int = 2, dims: dict[str, int] | None = None) -> int | None:
    builtin = next(k for k in all_builtins() if k.name == kernel)
    dims = dims or builtin.workload[0]["dims"]
    space = SearchSpace(builtin.space)
    sweep = load_sweep(sweep_path)
    sigmas = noise_sigmas(kernel)
    if setting["name"] == "surrogate":  # the experiment of bench/gpu/surrogate_experiment.py
        sampler: optuna.samplers.BaseSampler = SurrogateSampler(seed=seed, **setting.get("options", {}))
        view = space.sampler_view(bool(setting.get("ordered_choices", False)))
    else:
        name, options, ordered = samplers.resolve(setting["name"], dict(setting.get("options", {})), len(objectives),
                                                  lfbo.auto_picks(space, kernel))
        view = space.sampler_view(setting.get("ordered_choices", ordered))
        described = lfbo.structured_space(view.distributions, view.from_sampler, builtin.backend, kernel,
                                          [WorkloadShape(dims=dims)]) if name == "lfbo" else None
        sampler = samplers.build(name, seed, options, described)
    study = optuna.create_study(directions=["minimize"] * len(objectives), sampler=sampler)
    study.enqueue_trial(view.to_sampler(dict(builtin.default_config)))
    rng = random.Random(seed * 7919 + 1)
    seen: set[str] = set()
    worst: list[float] | None = None
    running: list[tuple[optuna.Trial, dict[str, Any]]] = []
    counted = 0
    best_seen, best_config, reached = float("inf"), None, None

    def ask() -> tuple[optuna.Trial, dict[str, Any]]:
        for attempt in range(MAX_REASKS + 1):
            trial = study.ask(view.distributions)
            config = view.from_sampler(trial.params)
            if config_key(config) not in seen or attempt == MAX_REASKS:
                break
            study.tell(trial, state=TrialState.FAIL)
        else:  # pragma: no cover
            raise AssertionError
        if config_key(config) in seen:  # an unseen point, as the mirror does
            study.tell(trial, state=TrialState.FAIL)
            points = (space.grid_point(i) for i in range(space.grid_size() or 0))
            rest = [p for p in points if config_key(p) not in seen]
            study.enqueue_trial(view.to_sampler(rest[rng.randrange(len(rest))]))
            trial = study.ask(view.distributions)
            config = view.from_sampler(trial.params)
        seen.add(config_key(config))
        return trial, config

    while counted < trials:
        while len(running) < parallelism and counted + len(running) < trials:
            trial, config = ask()
            values = sweep.table[config_key(config)]
            if values is None:  # refused before queuing: infeasible, not counted
                study._storage.set_trial_system_attr(trial._trial_id, "constraints:failed", 0.0)
                study._storage.set_trial_system_attr(trial._trial_id, "constraints:resources", 1.0)
                study.tell(trial, list(worst or [0.0] * len(objectives)))
                continue
            running.append((trial, config))
        trial, config = running.pop(0)
        recorded = sweep.table[config_key(config)]
        assert recorded is not None
        values = [recorded[o] * (1 + rng.gauss(0, sigmas[o])) for o in objectives]
        worst = values if worst is None else [max(w, v) for w, v in zip(worst, values, strict=True)]
        study._storage.set_trial_system_attr(trial._trial_id, "constraints:failed", 0.0)
        study._storage.set_trial_system_attr(trial._trial_id, "constraints:resources", 0.0)
        study.tell(trial, values)
        counted += 1
        runtime = values[objectives.index("runtime_ms")]
        if runtime < best_seen:
            best_seen, best_config = runtime, config
        if reached is None and best_config is not None:
            best_recorded = sweep.table[config_key(best_config)]
            if best_recorded and best_recorded["runtime_ms"] <= sweep.best * (1 + WITHIN):
                reached = counted
    return reached


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", default="surrogate,auto")
    parser.add_argument("--kernel", default="gemm_bf16")
    parser.add_argument("--sweep", default=str(SWEEP))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--dims", default="", help="the sweep's workload shape (JSON), if not the built-in's")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--options", default="{}", help="JSON laid over each setting's options")
    parser.add_argument("--label", default="", help="a name for this run in --json")
    parser.add_argument("--json", default="", help="append each setting's outcomes here (JSON lines)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    objectives = args.objectives.split(",")
    OBJECTIVES[:] = objectives
    extra = json.loads(args.options)
    for name in args.settings.split(","):
        setting = SETTINGS.get(name) or {"name": name}
        setting = {**setting, "options": {**setting.get("options", {}), **extra}}
        started = time.monotonic()
        reached = [one_study(args.kernel, Path(args.sweep), setting, seed, objectives,
                                dims=json.loads(args.dims) if args.dims else None) for seed in range(args.seeds)]
        hits = [r for r in reached if r is not None]
        over_all = statistics.median([r if r is not None else 10**6 for r in reached])
        if args.json:
            with open(args.json, "a") as out:
                record = {"label": args.label or name, "setting": setting, "kernel": args.kernel,
                          "objectives": objectives, "reached": reached}
                out.write(json.dumps(record) + "\n")
        of_hits = statistics.median(hits) if hits else "-"
        print(f"{name} {json.dumps(setting)}: {len(hits)}/{len(reached)} reached, median over all "
              f"{over_all if over_all < 10**6 else 'not reached'}, median of hits {of_hits}"
              f" ({time.monotonic() - started:.0f} s) {reached}", flush=True)


if __name__ == "__main__":
    main()
