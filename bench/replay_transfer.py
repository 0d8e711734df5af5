"""Leave-one-shape-out replay of transfer (warm_start: related) through the service.

For each shape of a kernel's recorded multi-shape sweep (bench/cpu_sweep.py), the shape is
held out: a team first tunes every other shape (one earlier study per shape, one after
another, `auto`, --earlier-trials trials, each with --earlier-warm-start: by default related,
so each starts from those before it, as a team's studies of a built-in do), then studies of
the held-out shape start, each with `warm_start: related` (what the service finds in the
team's earlier studies) or, for the first --cold seeds, `none`. The control plane runs
in-process (service.app on a SQLite file, FastAPI's TestClient) and a scripted worker
answers its leases from the sweep, each value times exp(a normal draw with the sweep's
pass-to-pass sigma: log-normal, as a time stays positive where sigma reaches 0.4 and more),
so every rule is the service's own. For a GPU kernel's sweep (recorded on an H200) the
worker registers with the H200's device limits, as the agent does, so that the service
refuses a configuration that cannot launch before queuing it and the budget does not count it.

Seeds: seed s uses history s mod --histories (the earlier studies' seeds); the held-out
studies of one history are all created before any of them runs, so that each starts from
the earlier studies alone, never from another seed's study of the held-out shape.

Per held-out shape and setting the table gives:
- seeds reaching 2%: a study reaches 2% at the first trial (baseline included, as the budget
  counts) after which its best observed runtime is a configuration whose recorded runtime is
  within 2% of the sweep's best at that shape;
- median trials to 2% over all seeds (a seed that never reaches it counts as not reached:
  the median is then "-" once half the seeds miss);
- the hypervolume ratio after 20 (40, 67) trials: the hypervolume of the recorded values of
  the configurations measured so far over that of the whole sweep, both as ratios to the
  baseline's recorded values, inside the reference point (REFERENCE in every objective: the
  service's default reference point), fixed per kernel and shape.

    python bench/replay_transfer.py bench/results/cpu_sweep_matmul_aligned_min.json --seeds 50 --histories 5 [--cold 10]
    python bench/replay_transfer.py SWEEP --held-out 1 --seeds 5 --json out.json
    python bench/replay_transfer.py --gpu gemm_bf16 SQUARE.json DECODE.json PREFILL.json --seeds 50
    python bench/replay_transfer.py --gpu rmsnorm PART1.json,PART2.json OTHER.json   # a shape swept in parts
    python bench/replay_transfer.py SWEEP --sampler nsga2   # every study's sampler.name (default auto)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gpu.replay_service import H200_LIMITS, SIGMAS_PER_RANGE_OF_FIVE  # noqa: E402
from service.domain import pareto  # noqa: E402

TRIALS = 67
WITHIN = 0.02
REFERENCE = 2.0
HV_AFTER = (20, 40, 67)


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@dataclass
class ShapeSweep:
    workload: list[dict[str, Any]]
    table: dict[str, dict[str, float] | None]  # configuration -> recorded values (None: failed)
    sigmas: dict[str, float]  # objective -> relative standard deviation of one measurement
    baseline: dict[str, Any]
    objectives: list[str]

    @property
    def best(self) -> float:
        return min(v["runtime_ms"] for v in self.table.values() if v)

    def relative(self, configs: list[dict[str, Any]]) -> np.ndarray:
        """Recorded values of `configs` (the measured ones) as ratios to the baseline's."""
        base = self.table[config_key(self.baseline)]
        assert base is not None
        rows = [self.table[config_key(c)] for c in configs]
        ratios = [[v[o] / base[o] for o in self.objectives] for v in rows if v]
        return np.array(ratios).reshape(-1, len(self.objectives))

    def hypervolume(self, configs: list[dict[str, Any]]) -> float:
        return pareto.hypervolume(self.relative(configs), [REFERENCE] * len(self.objectives))

    @property
    def whole_hypervolume(self) -> float:
        return self.hypervolume([json.loads(key) for key, values in self.table.items() if values])


@dataclass
class KernelSweep:
    kernel: str
    backend: str
    space: list[dict[str, Any]]
    objectives: list[str]
    shapes: list[ShapeSweep]
    device_limits: dict[str, Any] | None = None  # what the worker that recorded it reports at registration


def load_cpu(path: Path) -> KernelSweep:
    """A bench/cpu_sweep.py file: one ShapeSweep per shape."""
    data = json.loads(path.read_text())
    objectives = list(data["objectives"])
    baseline = {p["name"]: p["default"] for p in data["space"]}
    shapes = []
    for index, dims in enumerate(data["shapes"]):
        table = {config_key(r["config"]): (r["values"][index] if r.get("values") else None) for r in data["rows"]}
        sigmas = {name: data["noise"][index][f"{name}_sigma"] for name in objectives}
        shapes.append(ShapeSweep([{"dims": dims, "weight": 1.0}], table, sigmas, baseline, objectives))
    return KernelSweep(data["kernel"], data["backend"], data["space"], objectives, shapes)


GPU_OBJECTIVES = ["runtime_ms", "energy_mj", "p99_ms"]


def load_gpu(kernel: str, files: list[Path] | list[str], objectives: list[str] = GPU_OBJECTIVES) -> KernelSweep:
    """bench/gpu/sweep.py files of one built-in, one shape each (a file without `workload`
    swept the built-in's own), its space the built-in's. Their noise is that of the five
    repeats of the baseline in bench/results/gpu_<kernel>.json, as bench/gpu/replay_service.py
    takes it, for every shape."""
    from wire.kernels import get_builtin

    backend = "cuda" if kernel == "rmsnorm" else "triton"
    builtin = get_builtin(backend, kernel)
    assert builtin is not None
    repeats = json.loads((REPO / f"bench/results/gpu_{kernel}.json").read_text())["repeats"]
    sigmas = {name: repeats[f"{name}_spread"] / SIGMAS_PER_RANGE_OF_FIVE for name in objectives}
    shapes = []
    for path in files:
        parts = [json.loads(Path(part).read_text()) for part in str(path).split(",")]
        rows = [row for data in parts for row in data["rows"]]
        table = {config_key(r["config"]): ({o: r["values"][o] for o in objectives} if r.get("values") else None)
                 for r in rows}
        if len(table) != parts[0].get("space_size"):
            raise SystemExit(f"{path} does not cover the space: {len(table)} of {parts[0].get('space_size')} "
                             "configurations")
        shapes.append(ShapeSweep(parts[0].get("workload") or builtin.workload, table, sigmas,
                                 dict(builtin.default_config), objectives))
    # recorded on an H200, whose worker reports its limits: the service refuses what cannot launch before queuing
    return KernelSweep(kernel, backend, [], objectives, shapes, H200_LIMITS)


class Service:
    """The control plane in this process (or, given `client`, one reached through it), one
    scripted worker of `pool` that answers from the sweep, and a team per history."""

    def __init__(self, sweep: KernelSweep, client: Any = None, admin: dict[str, str] | None = None,
                 pool: str = "replay", fingerprint: dict[str, Any] | None = None) -> None:
        self.sweep = sweep
        self.pool = pool
        self.stack = ExitStack()
        if client is None:
            client, admin = self._in_process()
        assert admin is not None, "a client comes with the admin's headers"
        self.client, self.admin = client, admin
        token = self._post("/v1/tokens", {"name": f"recorded-{pool}", "kind": "worker", "pool": pool},
                           self.admin)["token"]
        self.worker_headers = {"Authorization": f"Bearer {token}"}
        fingerprint = fingerprint or {"backends": [sweep.backend], "gpu_name": "replay", "gpu_count": 1, "energy": True,
                                      **({"device_limits": sweep.device_limits} if sweep.device_limits else {})}
        registration = {"name": f"recorded-{pool}", "pool": pool, "fingerprint": fingerprint}
        self.worker_id = self._post("/v1/workers/register", registration, self.worker_headers)["worker_id"]

    def _in_process(self) -> tuple[Any, dict[str, str]]:
        from fastapi.testclient import TestClient

        from service.accounts import tokens as auth
        from service.app import create_app
        from service.config import Settings
        from service.store.db import Database
        from service.store.migrate import upgrade

        work = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="paretune-transfer-")))
        url = f"sqlite:///{work / 'replay.db'}"
        db = Database(url)
        upgrade(db.engine)
        with db.write() as session:
            admin = auth.bootstrap_admin(session)
        db.dispose()
        client = self.stack.enter_context(TestClient(create_app(Settings(database_url=url, data_dir=work,
                                                                         lease_s=600.0))))
        return client, {"Authorization": f"Bearer {admin}"}

    def close(self) -> None:
        self.stack.close()

    def team(self, name: str) -> dict[str, str]:
        self._post("/v1/teams", {"name": name}, self.admin)
        token = self._post("/v1/tokens", {"name": name, "kind": "user", "role": "member", "team": name},
                           self.admin)["token"]
        return {"Authorization": f"Bearer {token}"}

    def _post(self, path: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Any:
        response = self.client.post(path, json=body, headers=headers)
        if response.status_code >= 400:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.status_code != 204 else None

    def create(self, headers: dict[str, str], shape: ShapeSweep, seed: int, trials: int,
               warm_start: str, sampler: str = "auto", **fields: Any) -> dict[str, Any]:
        doc = {"name": f"{self.sweep.kernel} {json.dumps(shape.workload[0]['dims'])} seed {seed}",
               "kernel": {"backend": self.sweep.backend, "builtin": self.sweep.kernel, "workload": shape.workload},
               **({"space": self.sweep.space} if self.sweep.space else {}),  # else the built-in's
               "objectives": self.sweep.objectives, "warm_start": warm_start,
               "sampler": {"name": sampler, "seed": seed}, "budget": {"max_trials": trials}, "parallelism": 2,
               "pool": self.pool, **fields}
        return self._post("/v1/studies", doc, headers)  # type: ignore[no-any-return]

    def run(self, studies: dict[int, ShapeSweep], seed: int, team: dict[str, str]) -> dict[int, list[dict[str, Any]]]:
        """Answer every lease until the studies end; each study's trials in number order."""
        rng = random.Random(seed)
        done: dict[int, dict[int, dict[str, Any]]] = {sid: {} for sid in studies}
        while True:
            lease = self._lease(0.0) or self._lease_when_idle(list(studies), team)
            if lease is None:
                break
            trial = lease["trial"]
            shape = studies[trial["study_id"]]
            values = shape.table[config_key(trial["config"])]
            if values is None:
                body: dict[str, Any] = {"status": "failed", "failure_reason": "compile_error", "message": "recorded"}
            else:
                body = {"status": "completed", "metrics": {
                    name: {"value": values[name] * math.exp(rng.gauss(0, shape.sigmas[name]))}
                    for name in self.sweep.objectives}}
            self._post(f"/v1/leases/{lease['token']}/result", body, self.worker_headers)
            observed = body["metrics"]["runtime_ms"]["value"] if values is not None else None
            done[trial["study_id"]][trial["number"]] = {"config": trial["config"], "runtime_ms": observed}
        return {sid: [trials[n] for n in sorted(trials)] for sid, trials in done.items()}

    def _lease(self, wait_s: float) -> dict[str, Any] | None:
        response = self.client.post("/v1/leases", json={"worker_id": self.worker_id, "wait_s": wait_s},
                                    headers=self.worker_headers)
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"lease: {response.status_code} {response.text[:500]}")
        return response.json()  # type: ignore[no-any-return]

    def _lease_when_idle(self, study_ids: list[int], team: dict[str, str]) -> dict[str, Any] | None:
        """Nothing queued: wait for the next trial (the scheduling step queues it in the
        background) unless every study has ended."""
        for _ in range(30):
            states = [self.client.get(f"/v1/studies/{sid}", headers=team).json()["state"] for sid in study_ids]
            if "running" not in states:
                return None
            if (lease := self._lease(2.0)) is not None:
                return lease
        raise RuntimeError(f"studies {study_ids} still running with nothing to lease")


def outcome(shape: ShapeSweep, trials: list[dict[str, Any]], whole_hv: float) -> dict[str, Any]:
    best_seen, best_config, reached = float("inf"), None, None
    for index, trial in enumerate(trials, start=1):
        if trial["runtime_ms"] is not None and trial["runtime_ms"] < best_seen:
            best_seen, best_config = trial["runtime_ms"], trial["config"]
        if reached is None and best_config is not None:
            recorded = shape.table[config_key(best_config)]
            if recorded and recorded["runtime_ms"] <= shape.best * (1 + WITHIN):
                reached = index
    configs = [t["config"] for t in trials]
    return {"reached": reached, "hv_ratio": {k: shape.hypervolume(configs[:k]) / whole_hv for k in HV_AFTER},
            "first_configs": configs[:6]}


def held_out(sweep: KernelSweep, index: int, seeds: list[int], histories: int, earlier_trials: int,
             earlier_warm: str, trials: int, cold: int, sampler: str = "auto") -> list[dict[str, Any]]:
    """Every seed's studies of the held-out shape `index`, in one service."""
    service = Service(sweep)
    try:
        shape = sweep.shapes[index]
        others = [s for i, s in enumerate(sweep.shapes) if i != index]
        whole_hv = shape.whole_hypervolume
        out: list[dict[str, Any]] = []
        for history in range(histories):
            group = [s for s in seeds if s % histories == history]
            if not group:
                continue
            team = service.team(f"shape{index}-history{history}")
            for number, other in enumerate(others):  # one after another, each starting from those before
                study = service.create(team, other, 1000 + history * 100 + number, earlier_trials, earlier_warm,
                                       sampler)
                service.run({study["id"]: other}, 10_000 + history * 100 + number, team)
            runs_of = [("related", seed) for seed in group] + [("none", seed) for seed in group if seed < cold]
            created = {(setting, seed): service.create(team, shape, seed, trials, setting, sampler)
                       for setting, seed in runs_of}
            runs = service.run({study["id"]: shape for study in created.values()}, history, team)
            for (setting, seed), study in created.items():
                out.append({"shape": shape.workload[0]["dims"], "setting": setting, "seed": seed, "history": history,
                            "started_from": study["warm_start"]["sources"],
                            **outcome(shape, runs[study["id"]], whole_hv)})
        return out
    finally:
        service.close()


def median_reached(outcomes: list[dict[str, Any]]) -> float | None:
    """Over all seeds, a miss counting as past every budget; None when half or more missed."""
    values = sorted(o["reached"] if o["reached"] is not None else float("inf") for o in outcomes)
    middle = statistics.median(values)
    return None if middle == float("inf") else middle


def table(results: list[dict[str, Any]], trials: int) -> str:
    lines = [f"| held-out shape | warm_start | seeds reaching 2% in {trials} trials | median trials to 2% (all seeds) "
             f"| reached within 5 trials | hypervolume ratio after {' / '.join(map(str, HV_AFTER))} (median) "
             "| worst ratio after 20 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    keys = sorted({(json.dumps(r["shape"]), r["setting"]) for r in results}, key=lambda k: (k[0], k[1] != "related"))
    for shape, setting in keys:
        group = [r for r in results if json.dumps(r["shape"]) == shape and r["setting"] == setting]
        hits = sum(r["reached"] is not None for r in group)
        median = median_reached(group)
        early = sum(r["reached"] is not None and r["reached"] <= 5 for r in group)
        ratios = " / ".join(f"{statistics.median(r['hv_ratio'][k] for r in group):.3f}" for k in HV_AFTER)
        worst = min(r["hv_ratio"][20] for r in group)
        lines.append(f"| {shape} | {setting} | {hits}/{len(group)} | {'-' if median is None else median} | "
                     f"{early}/{len(group)} | {ratios} | {worst:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep", nargs="+", help="a bench/cpu_sweep.py file, or with --gpu one bench/gpu/sweep.py "
                                                 "file per shape")
    parser.add_argument("--gpu", default="", help="the built-in GPU kernel the sweep files are of")
    parser.add_argument("--objectives", default=",".join(GPU_OBJECTIVES),
                        help="with --gpu: the objectives of the replayed studies (those every sweep measured)")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--histories", type=int, default=5)
    parser.add_argument("--earlier-trials", type=int, default=TRIALS)
    parser.add_argument("--earlier-warm-start", default="related", choices=("related", "none"),
                        help="the earlier studies' warm start (related: each from those before it)")
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--held-out", default="", help="comma separated shape indices (default: every shape)")
    parser.add_argument("--cold", type=int, default=0, help="also run this many seeds with warm_start: none")
    parser.add_argument("--sampler", default="auto", help="every study's sampler.name")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sweep = (load_gpu(args.gpu, [Path(p) for p in args.sweep], args.objectives.split(",")) if args.gpu
             else load_cpu(Path(args.sweep[0])))
    indices = [int(i) for i in args.held_out.split(",")] if args.held_out else list(range(len(sweep.shapes)))
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    for index in indices:
        results += held_out(sweep, index, list(range(args.seeds)), args.histories, args.earlier_trials,
                            args.earlier_warm_start, args.trials, args.cold, args.sampler)
        print(f"shape {index} done, {time.monotonic() - started:.0f} s", flush=True)
    print(f"{sweep.kernel}: {' '.join(args.sweep)}; {args.seeds} seeds, {args.histories} histories of "
          f"{len(sweep.shapes) - 1} earlier studies x {args.earlier_trials} trials (warm_start "
          f"{args.earlier_warm_start}); {args.trials} trials; "
          f"{time.monotonic() - started:.0f} s\n")
    print(table(results, args.trials))
    if args.json:
        command = " ".join(["python", "bench/replay_transfer.py", *sys.argv[1:]])
        Path(args.json).write_text(json.dumps({"command": command, "results": results,
                                               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")


if __name__ == "__main__":
    main()
