"""Wall time to a new GEMM shape's best, on one GPU: a study with transfer from the team's
earlier shapes, a cold study, and Triton's own `triton.autotune`, in the same run.

The whole stack: the service on SQLite and one `paretune worker` (`--gpu 0`, warm runners)
per study, with a fresh artifact cache and Triton cache each, that first runs a one-trial
study of another team so that its runners are up before the study's clock starts.

What the team tuned before is the recorded H200 sweeps of the built-in GEMM at other shapes
(--related: square, decode, prefill): one study per shape (`auto`, 67 trials) whose trials a
scripted worker of another pool answers with the recorded values (bench/replay_transfer.py,
each value times the recorded noise), registered with the GPU worker's own fingerprint, so
that the service treats them as this device's trials. Their team shares them
(`share_trials: true`); each measured study is in a team of its own, so that no study starts
from another measured one.

Per seed, in turn:
- transfer: `warm_start: related`, `auto` (what a team's study of a built-in gets);
- cold: `warm_start: none`, `auto`;
- autotune: bench/gpu/autotune_gemm.py in a fresh process with an empty Triton cache.

A study's wall time runs from its creation to the result of its first trial whose
configuration the new shape's recorded sweep (--sweep) puts within 2% of its best; it is then
cancelled (reaching 2% is what is timed). A study that does not reach it within --trials
trials or --study-s seconds is reported as not reached, with its best. Autotune's wall time
is its first call; its pick is looked up in the same sweep.

    python3 bench/gpu/transfer_wall.py OUT --sweep NEW.json --related SQUARE.json DECODE.json PREFILL.json
    python bench/gpu/transfer_wall.py OUT --local    # cpu matmul, to test the script here
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "gpu"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import replay_transfer as rt  # noqa: E402
import run_studies as rs  # noqa: E402

WITHIN = 0.02
GPU_OBJECTIVES = ["runtime_ms", "energy_mj"]
LOCAL_OBJECTIVES = ["runtime_ms", "latency_ms"]
RECORDED_OBJECTIVES = ["runtime_ms", "p99_ms"]  # what every recorded GEMM sweep measured
LOCAL_MEASURE = {"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 100, "target_s": 0.1, "hot_window_s": 0.1}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Wall:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args = args
        self.out = out
        self.local = args.local
        self.work = Path(tempfile.mkdtemp(prefix="paretune-wall-"))
        self.env = rs.service_env(self.work)
        self.deadline = time.monotonic() + args.deadline_s
        self.worker: subprocess.Popen | None = None
        if self.local:
            kernel = rt.load_cpu(REPO / "bench/results/cpu_sweep_matmul_aligned_min.json")
            self.new, related = kernel.shapes[args.local_shape], kernel.shapes[:args.local_shape]
            self.kernel = rt.KernelSweep(kernel.kernel, kernel.backend, kernel.space, kernel.objectives, related)
            self.objectives = LOCAL_OBJECTIVES
        else:
            self.kernel = rt.load_gpu("gemm_bf16", args.related, RECORDED_OBJECTIVES)
            self.new = rt.load_gpu("gemm_bf16", [args.sweep], ["runtime_ms"]).shapes[0]
            self.objectives = GPU_OBJECTIVES
        self.results: list[dict[str, Any]] = []

    # -- the stack --------------------------------------------------------------------------

    def start(self) -> None:
        admin = rs.cli("token", "create", "--name", "bench", "--role", "admin", "--superuser", env=self.env)
        self.token = rs.cli("token", "create", "--name", "gpu0", "--worker", "--pool", "gpu0", env=self.env)
        rs.serve(self.work, self.env)
        self.admin = rs.Api(admin)
        self.client = httpx.Client(base_url=rs.SERVER, timeout=30)
        self.warmup_team = self.team("warmup")

    def team(self, name: str) -> rs.Api:
        self.admin.post("/v1/teams", {"name": name})
        token = self.admin.post("/v1/tokens", {"name": name, "kind": "user", "role": "member", "team": name})["token"]
        return rs.Api(token)

    def new_worker(self, name: str) -> None:
        rs.stop(self.worker)
        self.worker = rs.start_fresh_worker(self.work, self.env, self.token, name, lease_ahead=self.args.lease_ahead,
                                            compilers=self.args.compilers, local=self.local)
        warm = self.warmup_team.post("/v1/studies", self.document("warm-up", 1, "none", {"name": "random", "seed": 1},
                                                                   self.new.workload))
        rs.wait_study(self.warmup_team, warm["id"], time.monotonic() + self.args.preflight_s)

    def gpu_fingerprint(self) -> dict[str, Any]:
        """The GPU worker's registered fingerprint (it registers when it starts)."""
        for _ in range(120):
            workers = [w for w in self.admin.get("/v1/workers") if w["pool"] == "gpu0"]
            if workers:
                return dict(workers[-1]["fingerprint"])
            time.sleep(0.5)
        raise RuntimeError("the GPU worker did not register")

    # -- what the team tuned before ---------------------------------------------------------

    def record_history(self) -> list[dict[str, Any]]:
        """One shared study per recorded shape, answered from its sweep; returns them."""
        headers = {"Authorization": self.team("history").client.headers["Authorization"]}
        admin = {"Authorization": self.admin.client.headers["Authorization"]}
        service = rt.Service(self.kernel, client=self.client, admin=admin,
                             pool="recorded", fingerprint=self.gpu_fingerprint())
        studies = []
        for number, shape in enumerate(self.kernel.shapes):
            study = service.create(headers, shape, 1000 + number, rt.TRIALS, "related", share_trials=True)
            service.run({study["id"]: shape}, 10_000 + number, headers)
            studies.append({"id": study["id"], "workload": shape.workload,
                            "best_runtime_ms": shape.best, "started_from": study["warm_start"]["sources"]})
            rs.log(f"recorded study {study['id']} of {shape.workload[0]['dims']} done")
        return studies

    # -- the measured runs ------------------------------------------------------------------

    def document(self, name: str, trials: int, warm_start: str, sampler: dict[str, Any],
                 workload: list[dict[str, Any]]) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": name, "kernel": {"backend": self.kernel.backend, "builtin": self.kernel.kernel,
                                     "workload": workload},
            "objectives": self.objectives, "warm_start": warm_start, "sampler": sampler,
            "budget": {"max_trials": trials}, "parallelism": self.args.parallelism, "pool": "gpu0",
            "limits": {"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
        }
        if self.kernel.space:
            doc["space"] = self.kernel.space
        if self.local:
            doc["measure"] = LOCAL_MEASURE
        return doc

    def reached(self, trials: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The first completed trial (by result time) whose configuration the sweep puts within 2%."""
        limit = self.new.best * (1 + WITHIN)
        hits = []
        for trial in trials:
            recorded = self.new.table.get(rt.config_key(trial["config"]))
            if trial["state"] == "completed" and trial.get("finished_at") and recorded \
                    and recorded["runtime_ms"] <= limit:
                hits.append(trial)
        return min(hits, key=lambda t: _time(t["finished_at"])) if hits else None

    def study_run(self, mode: str, seed: int) -> dict[str, Any]:
        self.new_worker(f"{mode}-{seed}")
        api = self.team(f"{mode}-{seed}")
        warm_start = "related" if mode == "transfer" else "none"
        study = api.post("/v1/studies", self.document(f"GEMM {mode} seed {seed}", self.args.trials, warm_start,
                                                      {"name": "auto", "seed": seed}, self.new.workload))
        until = min(self.deadline, time.monotonic() + self.args.study_s)
        hit = None
        while hit is None and time.monotonic() < until:
            state = api.get(f"/v1/studies/{study['id']}")
            hit = self.reached(rs.all_trials(api, study["id"]))
            if rs.finished(state):
                break
            time.sleep(0.25)
        if not rs.finished(api.get(f"/v1/studies/{study['id']}")):
            api.post(f"/v1/studies/{study['id']}/cancel")
        data = rs.collect(api, study["id"])
        created = _time(data["study"]["created_at"])
        done = [t for t in data["trials"] if t["state"] == "completed" and t.get("values")]
        best = min(done, key=lambda t: t["values"]["runtime_ms"]) if done else None
        recorded = self.new.table.get(rt.config_key(best["config"])) if best else None
        outcome: dict[str, Any] = {
            "mode": mode, "seed": seed, "study": study["id"], "sampler": data["study"].get("sampler"),
            "started_from": data["study"].get("warm_start", {}).get("sources", []),
            "trials_finished": sum(1 for t in data["trials"] if t.get("finished_at")),
            "reached": hit is not None,
            "wall_s": (_time(hit["finished_at"]) - created).total_seconds() if hit else None,
            "trial": hit["number"] if hit else None,
            "best_config": best["config"] if best else None,
            "best_over_sweep_best": recorded["runtime_ms"] / self.new.best if recorded else None,
            "span_s": max(((_time(t["finished_at"]) - created).total_seconds() for t in data["trials"]
                           if t.get("finished_at")), default=None),
        }
        (self.out / f"study_{mode}_{seed}.json").write_text(json.dumps(data, default=str))
        rs.log(f"{mode} seed {seed}: " + json.dumps({k: v for k, v in outcome.items() if k != "started_from"}))
        return outcome

    def autotune_run(self, seed: int) -> dict[str, Any]:
        rs.stop(self.worker)
        self.worker = None
        dims = self.new.workload[0]["dims"]
        out = self.out / f"autotune_{seed}.json"
        env = {**self.env, "TRITON_CACHE_DIR": str(self.work / f"triton-autotune-{seed}"), "CUDA_VISIBLE_DEVICES": "0"}
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(REPO / "bench/gpu/autotune_gemm.py"), "--dims", json.dumps(dims),
                               "--out", str(out)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return {"mode": "autotune", "seed": seed, "error": done.stderr[-2000:]}
        result = json.loads(out.read_text())
        recorded = self.new.table.get(rt.config_key(result["pick"]))
        ratio = recorded["runtime_ms"] / self.new.best if recorded else None
        outcome = {"mode": "autotune", "seed": seed, "configs": result["configs"], "pick": result["pick"],
                   "pick_over_sweep_best": ratio, "reached": ratio is not None and ratio <= 1 + WITHIN,
                   "wall_s": result["first_call_s"], "process_s": time.monotonic() - started,
                   "bench_time_s": result["bench_time_s"], "rel_l2_error": result["rel_l2_error"]}
        rs.log("autotune seed " + str(seed) + ": " + json.dumps(outcome))
        return outcome

    def run(self) -> dict[str, Any]:
        self.start()
        self.new_worker("history")
        history = self.record_history()
        modes = self.args.modes.split(",")
        for seed in range(self.args.seeds):
            for mode in modes[seed % len(modes):] + modes[:seed % len(modes)]:  # each seed starts with another
                if time.monotonic() > self.deadline - self.args.study_s / 2:
                    rs.log(f"deadline: {mode} seed {seed} not run")
                    continue
                if mode == "autotune":
                    if not self.local:
                        self.results.append(self.autotune_run(seed))
                else:
                    self.results.append(self.study_run(mode, seed))
                self.save(history)
        rs.stop(self.worker)
        return self.save(history)

    def save(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        result = {"args": vars(self.args), "new_shape": self.new.workload, "new_sweep_best_ms": self.new.best,
                  "history": history, "results": self.results}
        (self.out / "transfer_wall.json").write_text(json.dumps(result, indent=1, default=str))
        (self.out / "logs.txt").write_text(rs.log_tails(self.work, 30000))
        return result


def summarize(result: dict[str, Any]) -> str:
    lines = ["| run | seeds reaching 2% | wall time to 2%, s (median; each) | trials to 2% (each) "
             "| best found over the sweep's best (each) |", "| --- | --- | --- | --- | --- |"]
    for mode in ("transfer", "cold", "autotune"):
        runs = [r for r in result["results"] if r.get("mode") == mode and "error" not in r]
        if not runs:
            continue
        walls = [r["wall_s"] for r in runs if r["reached"]]
        each = ", ".join(f"{r['wall_s']:.1f}" if r["reached"] else "not reached" for r in runs)
        median = f"{statistics.median(walls):.1f}" if len(walls) * 2 > len(runs) else "-"
        trials = ", ".join(str(r.get("trial", r.get("configs"))) for r in runs)
        ratio_key = "pick_over_sweep_best" if mode == "autotune" else "best_over_sweep_best"
        ratios = ", ".join(f"{r[ratio_key]:.4f}" if r.get(ratio_key) else "-" for r in runs)
        lines.append(f"| {mode} | {len(walls)}/{len(runs)} | {median} ({each}) | {trials} | {ratios} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--sweep", help="the new shape's recorded sweep (bench/gpu/sweep.py)")
    parser.add_argument("--related", nargs="*", default=[], help="recorded sweeps of the shapes tuned before")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--modes", default="transfer,cold,autotune")
    parser.add_argument("--trials", type=int, default=67)
    parser.add_argument("--study-s", type=float, default=150, help="a study's time limit")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--lease-ahead", type=int, default=2)
    parser.add_argument("--compilers", type=int, default=2)
    parser.add_argument("--deadline-s", type=float, default=540)
    parser.add_argument("--preflight-s", type=float, default=60)
    parser.add_argument("--local", action="store_true", help="the cpu matmul's recorded sweep, without a GPU")
    parser.add_argument("--local-shape", type=int, default=3, help="with --local: the shape held out (the "
                                                                   "earlier ones are the history)")
    args = parser.parse_args()
    if not args.local and not (args.sweep and args.related):
        parser.error("--sweep and --related are needed without --local")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rs.OUT = out
    result = rs.run_logged(Wall(args, out))
    text = summarize(result)
    (out / "transfer_wall.md").write_text(text + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    main()
