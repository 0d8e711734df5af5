"""Replay the recorded GEMM sweep through the real service, to choose the study's sampler.

The control plane runs in-process (service.app on a SQLite file, FastAPI's TestClient) and a
scripted worker answers its leases from the recorded sweep, so every rule the service applies
is the service's own code: the baseline first, `parallelism` trials in flight, repeats
refused (asked again, then an unseen point of the finite space), failures told to the sampler
as infeasible with the worst values seen, the budget. The worker behaves like the agent with
prefetch: it holds up to two leases; a configuration the sweep recorded as failed (a compile
error) is reported as soon as it is leased, as the agent's compile step reports it while the
other trial measures; a completed one is reported oldest first. Measured values are the
sweep's, times noise drawn from the spread of the recorded repeats (max/min - 1 of five
measurements of one configuration, taken as 2.33 standard deviations).

A study "reaches 2%" at the first trial after which its best observed runtime belongs to a
configuration whose recorded runtime is within 2% of the sweep's best; trials are counted as
the budget counts them (a refused infeasible trial counts only where the study says so).

Modes (--modes) say what the service knows of configurations that cannot launch (any kernel):
- before: what the replay did before device limits existed: the worker reports the sweep's
  out-of-resources failures as compile errors, the service knows no limits;
- after: the worker reports its GPU's limits (the H200's) at registration, the service
  refuses what cannot launch before queuing and, by default, does not count it;
- after_counted: the same with `budget.count_infeasible: true`;
- worker: no limits known to the service; the worker reports `infeasible` (as the agent does
  before compiling), not counted.

    python bench/gpu/replay_service.py --seeds 50 --jobs 2 [--settings a,b] [--modes before,after] [--json out.json]
    python bench/gpu/replay_service.py --kernel attention_fwd --sweep SWEEP.json ...  # another built-in

A built-in other than the GEMM needs its recorded sweep (bench/gpu/sweep.py --kernel NAME);
its noise comes from the five baseline repeats in bench/results/gpu_<kernel>.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SWEEP = REPO / "bench/results/gpu_raw_2026-11-29/sweep.json"  # the GEMM's
OBJECTIVES = ["runtime_ms", "energy_mj", "p99_ms"]
SIGMAS_PER_RANGE_OF_FIVE = 2.326  # expected (max - min) / sigma of five normal draws
TRIALS = 67
WITHIN = 0.02
H200_LIMITS = {"compute_capability": "9.0", "shared_memory_per_block": 232448, "threads_per_block": 1024,
               "registers_per_block": 65536, "registers_per_thread": 255}
# mode -> (the pool's workers report limits, the reason a worker gives, the study's budget options)
MODES: dict[str, tuple[bool, str, dict[str, Any]]] = {
    "before": (False, "compile_error", {}),
    "after": (True, "infeasible", {}),
    "after_counted": (True, "infeasible", {"count_infeasible": True}),
    "worker": (False, "infeasible", {}),
}


def repeats_file(kernel: str) -> Path:
    return REPO / f"bench/results/gpu_{kernel}.json"  # the latest run's five repeats of the baseline


# Sampler settings a study document can express (sampler.name + sampler.options).
SETTINGS: dict[str, dict[str, Any]] = {
    "random": {"name": "random"},
    "nsga2_pop8": {"name": "nsga2", "options": {"population_size": 8}},
    "nsga2_pop10": {"name": "nsga2", "options": {"population_size": 10}},
    "nsga2_pop16": {"name": "nsga2", "options": {"population_size": 16}},
    "nsga2_pop20": {"name": "nsga2", "options": {"population_size": 20}},
    "nsga2_pop10_mut0.5": {"name": "nsga2", "options": {"population_size": 10, "mutation_prob": 0.5}},
    "nsga2_pop20_mut0.5": {"name": "nsga2", "options": {"population_size": 20, "mutation_prob": 0.5}},
    "nsga3_pop10": {"name": "nsga3", "options": {"population_size": 10}},
    "nsga3_pop20": {"name": "nsga3", "options": {"population_size": 20}},
    "tpe_start10": {"name": "tpe", "options": {"n_startup_trials": 10}},
    "tpe_start10_mv": {"name": "tpe", "options": {"n_startup_trials": 10, "multivariate": True}},
    "tpe_start10_mv_liar": {
        "name": "tpe",
        "options": {"n_startup_trials": 10, "multivariate": True, "constant_liar": True},
    },
    "tpe_start10_mv_group_liar": {
        "name": "tpe",
        "options": {"n_startup_trials": 10, "multivariate": True, "group": True, "constant_liar": True},
    },
    "tpe_start20_mv_liar": {
        "name": "tpe",
        "options": {"n_startup_trials": 20, "multivariate": True, "constant_liar": True},
    },
    "tpe_start5_mv_liar": {
        "name": "tpe",
        "options": {"n_startup_trials": 5, "multivariate": True, "constant_liar": True},
    },
    # numeric choices shown to the sampler in order (sampler.ordered_choices), and `auto`
    "auto": {"name": "auto"},
    "lfbo": {"name": "lfbo"},
    "tpe": {"name": "tpe"},
    "tpe_ord": {"name": "tpe", "ordered_choices": True},
    "nsga2_pop6": {"name": "nsga2", "options": {"population_size": 6}},
    "nsga2_pop4_ord": {"name": "nsga2", "options": {"population_size": 4}, "ordered_choices": True},
    "nsga2_pop6_ord": {"name": "nsga2", "options": {"population_size": 6}, "ordered_choices": True},
    "nsga2_pop8_ord": {"name": "nsga2", "options": {"population_size": 8}, "ordered_choices": True},
    "nsga2_pop10_ord": {"name": "nsga2", "options": {"population_size": 10}, "ordered_choices": True},
    "nsga2_pop6_ord_poly": {
        "name": "nsga2", "options": {"population_size": 6, "mutation": "polynomial"}, "ordered_choices": True,
    },
    "nsga2_pop10_ord_poly": {
        "name": "nsga2", "options": {"population_size": 10, "mutation": "polynomial"}, "ordered_choices": True,
    },
    "nsga2_pop6_ord_sbx": {"name": "nsga2", "options": {"population_size": 6, "crossover": "sbx"},
                           "ordered_choices": True},
    "nsga2_pop6_ord_blx": {"name": "nsga2", "options": {"population_size": 6, "crossover": "blxalpha"},
                           "ordered_choices": True},
    "nsga2_pop6_ord_sbx_poly": {
        "name": "nsga2", "options": {"population_size": 6, "crossover": "sbx", "mutation": "polynomial"},
        "ordered_choices": True,
    },
    "tpe_start10_ord": {"name": "tpe", "options": {"n_startup_trials": 10}, "ordered_choices": True},
    "tpe_start5_mv_ord": {"name": "tpe", "options": {"n_startup_trials": 5, "multivariate": True},
                          "ordered_choices": True},
    "tpe_start10_mv_ord": {"name": "tpe", "options": {"n_startup_trials": 10, "multivariate": True},
                           "ordered_choices": True},
    "tpe_start10_mv_liar_ord": {
        "name": "tpe", "options": {"n_startup_trials": 10, "multivariate": True, "constant_liar": True},
        "ordered_choices": True,
    },
}


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


class Sweep(NamedTuple):
    table: dict[str, dict[str, float] | None]  # configuration -> recorded values (None: failed)
    messages: dict[str, str]  # configuration -> the recorded failure's message
    best: float  # the best recorded runtime


def load_sweep(sweep: Path) -> Sweep:
    """A sweep, from one file or the comma-separated files of its slices (sweep.py --shard)."""
    rows = [row for part in str(sweep).split(",") for row in json.loads(Path(part).read_text())["rows"]]
    table = {config_key(r["config"]): (r["values"] if r.get("values") else None) for r in rows}
    messages = {config_key(r["config"]): r.get("message") or "" for r in rows}
    return Sweep(table, messages, min(v["runtime_ms"] for v in table.values() if v))


def noise_sigmas(kernel: str) -> dict[str, float]:
    summary = json.loads(repeats_file(kernel).read_text())
    return {name: summary["repeats"][f"{name}_spread"] / SIGMAS_PER_RANGE_OF_FIVE for name in OBJECTIVES}


# --- one process: a service, a worker, one study after another ------------------------------


class Replayer:
    def __init__(self, kernel: str, sweep: Path, warm_sweep: Path | None = None) -> None:
        from fastapi.testclient import TestClient

        from service.accounts import tokens as auth
        from service.app import create_app
        from service.config import Settings
        from service.store.db import Database
        from service.store.migrate import upgrade
        from service.studies.space import SearchSpace
        from wire.kernels import all_builtins

        self.kernel = {"backend": next(k.backend for k in all_builtins() if k.name == kernel), "builtin": kernel}
        self.sweep = load_sweep(sweep)
        size = SearchSpace(next(k.space for k in all_builtins() if k.name == kernel)).grid_size()
        if len(self.sweep.table) != size:
            raise SystemExit(f"{sweep} holds {len(self.sweep.table)} of the {size} configurations of {kernel}'s space")
        self.warm_sweep = load_sweep(warm_sweep) if warm_sweep else None
        self.last_study_id = 0
        self.sigmas = noise_sigmas(kernel)
        self.stack = ExitStack()
        work = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="paretune-replay-")))
        url = f"sqlite:///{work / 'replay.db'}"
        db = Database(url)
        upgrade(db.engine)
        with db.write() as session:
            admin = auth.bootstrap_admin(session)
        db.dispose()
        settings = Settings(database_url=url, data_dir=work, lease_s=600.0)
        self.client = self.stack.enter_context(TestClient(create_app(settings)))
        self.admin = {"Authorization": f"Bearer {admin}"}
        # whether the worker reports its GPU's limits -> (its id, its headers); one pool each
        self.workers: dict[bool, tuple[int, dict[str, str]]] = {}
        for with_limits in (False, True):
            pool = self._pool(with_limits)
            token = self._post("/v1/tokens", {"name": "w", "kind": "worker", "pool": pool}, self.admin)["token"]
            headers = {"Authorization": f"Bearer {token}"}
            fingerprint: dict[str, Any] = {"backends": [self.kernel["backend"]], "energy": True,
                                           "gpu_name": "replay", "gpu_count": 1}
            if with_limits:
                fingerprint["device_limits"] = H200_LIMITS
            registered = self._post(
                "/v1/workers/register", {"name": "replay", "pool": pool, "fingerprint": fingerprint}, headers
            )
            self.workers[with_limits] = (registered["worker_id"], headers)

    @staticmethod
    def _pool(with_limits: bool) -> str:
        return "replay-limits" if with_limits else "replay"

    def _post(self, path: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Any:
        response = self.client.post(path, json=body, headers=headers)
        if response.status_code >= 400:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.status_code != 204 else None

    def _lease(self, with_limits: bool, wait_s: float = 0.0) -> dict[str, Any] | None:
        worker_id, headers = self.workers[with_limits]
        response = self.client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": wait_s}, headers=headers)
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"lease: {response.status_code} {response.text[:500]}")
        return response.json()  # type: ignore[no-any-return]

    def _measure(self, config: dict[str, Any], rng: random.Random, sweep: Sweep, reason: str) -> dict[str, Any]:
        values = sweep.table[config_key(config)]
        if values is None:
            return {"status": "failed", "failure_reason": reason, "message": sweep.messages[config_key(config)]}
        metrics = {name: {"value": values[name] * (1 + rng.gauss(0, self.sigmas[name]))} for name in OBJECTIVES}
        return {"status": "completed", "metrics": metrics}

    def study(self, sampler: dict[str, Any], seed: int, trials: int, parallelism: int,
              mode: str = "before", sweep: Sweep | None = None) -> list[dict[str, Any]]:
        """Run one study (measured from `sweep`, else the replayed sweep); every trial in the
        order the service created them, with whether it was leased and whether it counts
        against the budget. Its id is left in `last_study_id`."""
        sweep = self.sweep if sweep is None else sweep
        with_limits, reason, budget = MODES[mode]
        headers = self.workers[with_limits][1]
        rng = random.Random(seed * 7919 + 1)
        doc = {
            "name": f"replay {sampler['name']} {seed}",
            "kernel": self.kernel,
            "objectives": OBJECTIVES,
            "sampler": {**sampler, "seed": seed},
            "budget": {"max_trials": trials, **budget},
            "parallelism": parallelism,
            "pool": self._pool(with_limits),
            # cold: a built-in's studies start from related studies by default (warm_start:
            # related), here the earlier seeds' studies of the same kernel and space
            "warm_start": "none",
        }
        study_id = self.last_study_id = self._post("/v1/studies", doc, self.admin)["id"]
        held: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (token, trial, result), oldest first
        done: dict[int, dict[str, Any]] = {}
        while True:
            while len(held) < 2 and (
                lease := self._lease(with_limits) or self._lease_when_idle(study_id, held, with_limits)
            ) is not None:
                result = self._measure(lease["trial"]["config"], rng, sweep, reason)
                if result["status"] == "failed":  # the compile step reports it at once
                    self._post(f"/v1/leases/{lease['token']}/result", result, headers)
                    done[lease["trial"]["number"]] = {"config": lease["trial"]["config"], "runtime_ms": None}
                else:
                    held.append((lease["token"], lease["trial"], result))
            if not held:
                break
            token, trial, result = held.pop(0)
            self._post(f"/v1/leases/{token}/result", result, headers)
            done[trial["number"]] = {"config": trial["config"], "runtime_ms": result["metrics"]["runtime_ms"]["value"]}
        state = self.client.get(f"/v1/studies/{study_id}", headers=self.admin).json()["state"]
        if state == "running":
            raise RuntimeError(f"study {study_id} still running with nothing to lease")
        items = self.client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000},
                                headers=self.admin).json()["items"]
        return [
            {
                "config": item["config"],
                "runtime_ms": done.get(item["number"], {}).get("runtime_ms"),
                "leased": item["number"] in done,
                "counted": item["failure_reason"] != "infeasible" or bool(budget.get("count_infeasible")),
                "unlaunchable": sweep.table[config_key(item["config"])] is None,
            }
            for item in sorted(items, key=lambda t: t["number"])
        ]

    def _lease_when_idle(self, study_id: int, held: list[Any], with_limits: bool) -> dict[str, Any] | None:
        """With nothing in hand, wait for the study's next trial (the scheduling step that
        queues it runs in the background, and lags under load) unless the study has ended."""
        if held:
            return None
        for _ in range(30):
            if self.client.get(f"/v1/studies/{study_id}", headers=self.admin).json()["state"] != "running":
                return None
            if (lease := self._lease(with_limits, wait_s=2.0)) is not None:
                return lease
        return None

    def outcome(self, every: list[dict[str, Any]]) -> dict[str, Any]:
        """Trials until the best observed runtime is a configuration within 2% of the sweep's
        best, counted as the budget counts them; and what went to configurations that
        cannot launch: proposals, budget and leases."""
        table, best = self.sweep.table, self.sweep.best
        trials = [t for t in every if t["counted"]]
        leased = [t for t in every if t["leased"]]
        best_seen, best_config, reached = float("inf"), None, None
        for index, trial in enumerate(trials, start=1):
            if trial["runtime_ms"] is not None and trial["runtime_ms"] < best_seen:
                best_seen, best_config = trial["runtime_ms"], trial["config"]
            if reached is None and best_config is not None:
                recorded = table[config_key(best_config)]
                if recorded and recorded["runtime_ms"] <= best * (1 + WITHIN):
                    reached = index
        final = table[config_key(best_config)] if best_config else None
        distinct = len({config_key(t["config"]) for t in trials})
        return {
            "trials": len(trials),
            "distinct": distinct,
            "failed": sum(t["runtime_ms"] is None for t in trials),
            "proposals": len(every),
            "unlaunchable_proposals": sum(t["unlaunchable"] for t in every),
            "unlaunchable_in_budget": sum(t["unlaunchable"] for t in trials),
            "leases": len(leased),
            "unlaunchable_leases": sum(t["unlaunchable"] for t in leased),
            "reached": reached,
            "final_gap": (final["runtime_ms"] / best - 1) if final else None,
            "first_configs": [t["config"] for t in trials[:12]],
        }


_REPLAYER: Replayer | None = None


def _job(job: tuple[str, str, int, dict[str, Any]]) -> tuple[str, int, dict[str, Any]]:
    global _REPLAYER
    name, mode, seed, run = job
    trials, parallelism = run["trials"], run["parallelism"]
    if _REPLAYER is None:
        import warnings

        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        OBJECTIVES[:] = run["objectives"]  # this process's studies
        _REPLAYER = Replayer(run["kernel"], Path(run["sweep"]), Path(run["warm_sweep"]) if run["warm_sweep"] else None)
    sampler = SETTINGS[name]
    if _REPLAYER.warm_sweep is not None:  # an earlier study of the kernel, measured from the other sweep
        earlier = SETTINGS[run["warm_setting"] or name]
        _REPLAYER.study(earlier, seed + 1000, trials, parallelism, mode, _REPLAYER.warm_sweep)
        warm = {"studies": [_REPLAYER.last_study_id], "trials": run["warm_trials"]}
        sampler = {**sampler, "warm_start": warm}
    outcome = _REPLAYER.outcome(_REPLAYER.study(sampler, seed, trials, parallelism, mode))
    return f"{name} {mode}" if mode != "before" else name, seed, outcome


def table_markdown(results: dict[str, list[dict[str, Any]]], trials: int) -> str:
    lines = [
        f"| setting | sampler document | reached 2% in {trials} trials (seeds) | success rate | "
        "median trials to 2% (successes) | median final gap | failed trials (median) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ranked = sorted(results.items(), key=lambda kv: -sum(o["reached"] is not None for o in kv[1]))
    for name, outcomes in ranked:
        hits = [o["reached"] for o in outcomes if o["reached"] is not None]
        gaps = [o["final_gap"] for o in outcomes if o["final_gap"] is not None]
        lines.append(
            f"| {name} | `{json.dumps(SETTINGS[name.split()[0]])}` | {len(hits)}/{len(outcomes)} | "
            f"{len(hits) / len(outcomes):.2f} | {statistics.median(hits) if hits else '-'} | "
            f"{statistics.median(gaps):.4f} | {statistics.median(o['failed'] for o in outcomes)} |"
        )
    return "\n".join(lines)


def unlaunchable_markdown(results: dict[str, list[dict[str, Any]]]) -> str:
    """What configurations that cannot launch took, summed over the seeds: of the sampler's
    proposals, of the trial budget, and of the leases handed to workers (GPU time)."""
    lines = [
        "| setting | proposals that cannot launch | share of the trial budget | share of leases | "
        "budget share, worst seed |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, outcomes in sorted(results.items()):
        proposals = sum(o["proposals"] for o in outcomes)
        bad = sum(o["unlaunchable_proposals"] for o in outcomes)
        budget = sum(o["trials"] for o in outcomes)
        in_budget = sum(o["unlaunchable_in_budget"] for o in outcomes)
        leases = sum(o["leases"] for o in outcomes)
        bad_leases = sum(o["unlaunchable_leases"] for o in outcomes)
        worst = max(o["unlaunchable_in_budget"] / o["trials"] for o in outcomes)
        lines.append(
            f"| {name} | {bad}/{proposals} ({bad / proposals:.1%}) | {in_budget}/{budget} ({in_budget / budget:.1%}) | "
            f"{bad_leases}/{leases} ({bad_leases / leases:.1%}) | {worst:.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--kernel", default="gemm_bf16")
    parser.add_argument("--sweep", default=str(SWEEP), help="the kernel's recorded sweep (bench/gpu/sweep.py)")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--seed-list", default="", help="explicit seeds, comma separated (overrides --seeds)")
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=max(1, multiprocessing.cpu_count()))
    parser.add_argument("--json", default="", help="write every study's outcome here")
    parser.add_argument("--warm-sweep", default="",
                        help="warm start each study from an earlier study measured from this sweep (another shape)")
    parser.add_argument("--warm-trials", type=int, default=4, help="sampler.warm_start.trials")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help="the studies' objectives")
    parser.add_argument("--warm-setting", default="", help="the earlier study's setting (default: the same)")
    parser.add_argument("--modes", default="before", help=f"comma separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    names = args.settings.split(",")
    modes = args.modes.split(",")
    seeds = [int(s) for s in args.seed_list.split(",")] if args.seed_list else list(range(args.seeds))
    run = {"trials": args.trials, "parallelism": args.parallelism, "kernel": args.kernel, "sweep": args.sweep,
           "warm_sweep": args.warm_sweep, "warm_trials": args.warm_trials, "warm_setting": args.warm_setting,
           "objectives": args.objectives.split(",")}
    OBJECTIVES[:] = run["objectives"]
    jobs = [(name, mode, seed, run) for name in names for mode in modes for seed in seeds]
    started = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {}
    raw: list[dict[str, Any]] = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for name, seed, outcome in pool.imap_unordered(_job, jobs):
            results.setdefault(name, []).append(outcome)
            raw.append({"setting": name, "seed": seed, **outcome})
            if args.json and len(raw) % 10 == 0:  # a stop leaves what was done
                Path(args.json).write_text(json.dumps(raw))
    best = load_sweep(Path(args.sweep)).best
    sigmas = {k: round(v, 4) for k, v in noise_sigmas(args.kernel).items()}
    print(
        f"{args.kernel}: sweep best {best:.4f} ms; noise sigmas {json.dumps(sigmas)};"
        f" objectives {args.objectives}; {len(seeds)} seeds, {args.trials} trials, parallelism {args.parallelism};"
        + (f" warm start: {args.warm_trials} from a study ({args.warm_setting or 'same setting'}) on {args.warm_sweep};"
           if args.warm_sweep else "")
        + f" {time.monotonic() - started:.0f} s\n"
    )
    print(table_markdown(results, args.trials))
    print()
    print(unlaunchable_markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(sorted(raw, key=lambda r: (r["setting"], r["seed"])), indent=1))


if __name__ == "__main__":
    main()
