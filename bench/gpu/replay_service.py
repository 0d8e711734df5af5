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

Modes (--modes) say what the service knows of configurations that cannot launch:
- before: what the replay did before device limits existed: the worker reports the sweep's
  out-of-resources failures as compile errors, the service knows no limits;
- after: the worker reports its GPU's limits (the H200's) at registration, the service
  refuses what cannot launch before queuing and, by default, does not count it;
- after_counted: the same with `budget.count_infeasible: true`;
- worker: no limits known to the service; the worker reports `infeasible` (as the agent does
  before compiling), not counted.

    python bench/gpu/replay_service.py --seeds 50 --jobs 2 [--settings a,b] [--modes before,after]
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
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SWEEP = REPO / "bench/results/gpu_raw_2026-11-29/sweep.json"
REPEATS = REPO / "bench/results/gpu_gemm_bf16.json"  # the latest run's five repeats of the baseline
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
}


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def load_sweep() -> tuple[dict[str, dict[str, float] | None], float]:
    rows = json.loads(SWEEP.read_text())["rows"]
    table = {config_key(r["config"]): (r["values"] if r.get("values") else None) for r in rows}
    best = min(v["runtime_ms"] for v in table.values() if v)
    return table, best


def noise_sigmas() -> dict[str, float]:
    summary = json.loads(REPEATS.read_text())
    return {name: summary["repeats"][f"{name}_spread"] / SIGMAS_PER_RANGE_OF_FIVE for name in OBJECTIVES}


# --- one process: a service, a worker, one study after another ------------------------------


class Replayer:
    def __init__(self) -> None:
        from fastapi.testclient import TestClient

        from service.accounts import tokens as auth
        from service.app import create_app
        from service.config import Settings
        from service.store.db import Database
        from service.store.migrate import upgrade

        self.table, self.best = load_sweep()
        self.messages = {config_key(r["config"]): r.get("message") or "" for r in json.loads(SWEEP.read_text())["rows"]}
        self.sigmas = noise_sigmas()
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
        token = self._post("/v1/tokens", {"name": "w", "kind": "worker", "pool": "replay"}, self.admin)["token"]
        self.worker_headers = {"Authorization": f"Bearer {token}"}
        self.worker_ids: dict[bool, int] = {}  # whether it reports its GPU's limits -> worker id
        for with_limits in (False, True):
            fingerprint: dict[str, Any] = {"backends": ["triton"], "energy": True, "gpu_name": "replay",
                                           "gpu_count": 1}
            if with_limits:
                fingerprint["device_limits"] = H200_LIMITS
            pool = "replay-limits" if with_limits else "replay"
            headers = self.worker_headers
            if with_limits:
                token = self._post("/v1/tokens", {"name": "w", "kind": "worker", "pool": pool}, self.admin)["token"]
                headers = {"Authorization": f"Bearer {token}"}
                self.limits_headers = headers
            registered = self._post(
                "/v1/workers/register", {"name": "replay", "pool": pool, "fingerprint": fingerprint}, headers
            )
            self.worker_ids[with_limits] = registered["worker_id"]

    def _post(self, path: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Any:
        response = self.client.post(path, json=body, headers=headers)
        if response.status_code >= 400:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.status_code != 204 else None

    def _headers(self, with_limits: bool) -> dict[str, str]:
        return self.limits_headers if with_limits else self.worker_headers

    def _lease(self, with_limits: bool, wait_s: float = 0) -> dict[str, Any] | None:
        response = self.client.post(
            "/v1/leases", json={"worker_id": self.worker_ids[with_limits], "wait_s": wait_s},
            headers=self._headers(with_limits),
        )
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"lease: {response.status_code} {response.text[:500]}")
        return response.json()  # type: ignore[no-any-return]

    def _finished(self, study_id: int) -> bool:
        return self.client.get(f"/v1/studies/{study_id}", headers=self.admin).json()["state"] != "running"

    def _measure(self, config: dict[str, Any], rng: random.Random, reason: str) -> dict[str, Any]:
        values = self.table[config_key(config)]
        if values is None:
            return {"status": "failed", "failure_reason": reason, "message": self.messages[config_key(config)]}
        metrics = {name: {"value": values[name] * (1 + rng.gauss(0, self.sigmas[name]))} for name in OBJECTIVES}
        return {"status": "completed", "metrics": metrics}

    def study(self, sampler: dict[str, Any], seed: int, trials: int, parallelism: int,
              mode: str = "before") -> list[dict[str, Any]]:
        """Run one study; every trial in the order the service created them, with whether
        it was leased and whether it counts against the budget."""
        with_limits, reason, budget = MODES[mode]
        headers = self._headers(with_limits)
        rng = random.Random(seed * 7919 + 1)
        doc = {
            "name": f"replay {sampler['name']} {seed}",
            "kernel": {"backend": "triton", "builtin": "gemm_bf16"},
            "objectives": OBJECTIVES,
            "sampler": {**sampler, "seed": seed},
            "budget": {"max_trials": trials, **budget},
            "parallelism": parallelism,
            "pool": "replay-limits" if with_limits else "replay",
        }
        study_id = self._post("/v1/studies", doc, self.admin)["id"]
        held: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (token, trial, result), oldest first
        done: dict[int, dict[str, Any]] = {}
        while True:
            while len(held) < 2:
                lease = self._lease(with_limits)
                for _ in range(100):
                    # with nothing in hand, wait as the agent's long-poll does for the study's
                    # step (it runs in the background after each result) to queue more
                    if lease is not None or held or self._finished(study_id):
                        break
                    lease = self._lease(with_limits, 0.05)
                if lease is None:
                    break
                result = self._measure(lease["trial"]["config"], rng, reason)
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
        study = self.client.get(f"/v1/studies/{study_id}", headers=self.admin).json()
        if study["state"] == "running":
            raise RuntimeError(f"study {study_id} still running with nothing to lease")
        items = self.client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000},
                                headers=self.admin).json()["items"]
        rows = []
        for item in sorted(items, key=lambda t: t["number"]):
            infeasible = item["failure_reason"] == "infeasible"
            rows.append({
                "config": item["config"],
                "runtime_ms": done.get(item["number"], {}).get("runtime_ms"),
                "leased": item["number"] in done,
                "counted": not infeasible or bool(budget.get("count_infeasible")),
                "unlaunchable": self.table[config_key(item["config"])] is None,
            })
        return rows

    def outcome(self, every: list[dict[str, Any]]) -> dict[str, Any]:
        """Trials until the best observed runtime is a configuration within 2% of the sweep's
        best, counted as the budget counts them; and what went to configurations that
        cannot launch: proposals, budget and leases."""
        trials = [t for t in every if t.get("counted", True)]
        leased = [t for t in every if t.get("leased", True)]
        best_seen, best_config, reached = float("inf"), None, None
        for index, trial in enumerate(trials, start=1):
            if trial["runtime_ms"] is not None and trial["runtime_ms"] < best_seen:
                best_seen, best_config = trial["runtime_ms"], trial["config"]
            if reached is None and best_config is not None:
                recorded = self.table[config_key(best_config)]
                if recorded and recorded["runtime_ms"] <= self.best * (1 + WITHIN):
                    reached = index
        final = self.table[config_key(best_config)] if best_config else None
        distinct = len({config_key(t["config"]) for t in trials})
        return {
            "trials": len(trials),
            "distinct": distinct,
            "failed": sum(t["runtime_ms"] is None for t in trials),
            "proposals": len(every),
            "unlaunchable_proposals": sum(t.get("unlaunchable", False) for t in every),
            "unlaunchable_in_budget": sum(t.get("unlaunchable", False) for t in trials),
            "leases": len(leased),
            "unlaunchable_leases": sum(t.get("unlaunchable", False) for t in leased),
            "reached": reached,
            "final_gap": (final["runtime_ms"] / self.best - 1) if final else None,
            "first_configs": [t["config"] for t in trials[:12]],
        }


_REPLAYER: Replayer | None = None


def _job(job: tuple[str, int, int, int, str]) -> tuple[str, int, dict[str, Any]]:
    global _REPLAYER
    name, seed, trials, parallelism, mode = job
    if _REPLAYER is None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        _REPLAYER = Replayer()
    outcome = _REPLAYER.outcome(_REPLAYER.study(SETTINGS[name], seed, trials, parallelism, mode))
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
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--seed-list", default="", help="explicit seeds, comma separated (overrides --seeds)")
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=max(1, multiprocessing.cpu_count()))
    parser.add_argument("--json", default="", help="write every study's outcome here")
    parser.add_argument("--modes", default="before", help=f"comma separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    names = args.settings.split(",")
    modes = args.modes.split(",")
    seeds = [int(s) for s in args.seed_list.split(",")] if args.seed_list else list(range(args.seeds))
    jobs = [(name, seed, args.trials, args.parallelism, mode) for name in names for mode in modes for seed in seeds]
    started = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {}
    raw: list[dict[str, Any]] = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for name, seed, outcome in pool.imap_unordered(_job, jobs):
            results.setdefault(name, []).append(outcome)
            raw.append({"setting": name, "seed": seed, **outcome})
    _, best = load_sweep()
    print(
        f"sweep best {best:.4f} ms; noise sigmas {json.dumps({k: round(v, 4) for k, v in noise_sigmas().items()})};"
        f" {len(seeds)} seeds, {args.trials} trials, parallelism {args.parallelism};"
        f" {time.monotonic() - started:.0f} s\n"
    )
    print(table_markdown(results, args.trials))
    print()
    print(unlaunchable_markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(sorted(raw, key=lambda r: (r["setting"], r["seed"])), indent=1))


if __name__ == "__main__":
    main()
