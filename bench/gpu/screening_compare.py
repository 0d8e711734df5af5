"""Screening against full measurement, through the whole stack on one GPU: the service on
SQLite and one `paretune worker` agent (`--gpu 0`, warm runners), the built-in bf16 GEMM
4096^3 with objectives runtime_ms and energy_mj, two studies of the same sampler and seed one
after the other: one measuring every trial fully, one screening first (`measure.screen`,
docs/measurement.md "Screening"). Then, with the GPU to itself, the configurations that
matter are re-measured at full fidelity in interleaved rounds (bench/gpu/sweep.py
--only-versus): the recorded sweep's best, the baseline, each study's best and every point of
the screening study's front.

Each study gets a worker of its own with a fresh artifact cache and Triton cache (neither
study compiles less because the other ran first), which first runs a one-trial study of the
baseline and then waits for its warm runners (the spares that study started included) to finish
their warm-up, so that the study's clock starts on a warm worker, as on one that has been up a
while.

Reported (OUT/screening_compare.json and .md):
- trials per GPU-minute of each study: trials finished over the span from the study's
  creation to its last result (the GPU serves one study at a time), and GPU seconds per trial
  (the run phases' wall time, both stages);
- each study's best configuration, and its re-measured runtime against the sweep's best's;
- wall time from the study's creation to the first fully measured trial whose configuration
  is within 2% of the sweep's best in the recorded sweep (gpu_raw_2026-11-29/sweep.json);
- whether the screening study's front keeps its order when re-measured.

    python3 bench/gpu/screening_compare.py OUT [--trials 67] [--seed 2] [--energy-runtime-ratio 1.1]
    python bench/gpu/screening_compare.py OUT --local    # CPU kernels, to test the script here
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "gpu"))

import run_studies as rs  # noqa: E402

SWEEP = REPO / "bench" / "results" / "gpu_raw_2026-11-29" / "sweep.json"
GPU_MEASURE = {"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2, "hot_window_s": 1.6}
LOCAL_MEASURE = {"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 100, "target_s": 0.2, "hot_window_s": 0.1}


class Compare:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args = args
        self.out = out
        self.local = args.local
        self.backend, self.builtin = ("cpu", "matmul") if self.local else ("triton", "gemm_bf16")
        self.objectives = ["runtime_ms", "latency_ms"] if self.local else ["runtime_ms", "energy_mj"]
        self.measure = LOCAL_MEASURE if self.local else GPU_MEASURE
        self.work = Path(tempfile.mkdtemp(prefix="paretune-screening-"))
        self.env = rs.service_env(self.work)
        self.started = time.monotonic()
        self.deadline = self.started + args.deadline_s
        self.worker: subprocess.Popen | None = None
        self.cache_dirs: list[Path] = []

    def log(self, message: str) -> None:
        rs.log(message)

    # -- the stack --------------------------------------------------------------------------

    def start_service(self) -> rs.Api:
        admin = rs.cli("token", "create", "--name", "bench", "--role", "admin", env=self.env)
        self.token = rs.cli("token", "create", "--name", "gpu0", "--worker", "--pool", "gpu0", env=self.env)
        rs.serve(self.work, self.env)
        return rs.Api(admin)

    def start_worker(self, name: str) -> None:
        self.cache_dirs.append(self.work / f"artifacts-{name}")
        self.worker = rs.start_fresh_worker(self.work, self.env, self.token, name, lease_ahead=self.args.lease_ahead,
                                            compilers=self.args.compilers, local=self.local)

    def stop_worker(self) -> None:
        rs.stop(self.worker)
        self.worker = None

    # -- studies ----------------------------------------------------------------------------

    def document(self, name: str, trials: int, screen: bool, sampler: dict[str, Any]) -> dict[str, Any]:
        measure: dict[str, Any] = dict(self.measure)
        if screen:
            measure["screen"] = {}
            if self.args.energy_runtime_ratio and not self.local:
                measure["promote"] = {"energy_runtime_ratio": self.args.energy_runtime_ratio}
        return {
            "name": name, "kernel": {"backend": self.backend, "builtin": self.builtin},
            "objectives": self.objectives, "sampler": sampler, "budget": {"max_trials": trials},
            "parallelism": self.args.parallelism, "pool": "gpu0", "measure": measure,
            "limits": {"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
        }

    def run_study(self, api: rs.Api, mode: str, until: float) -> dict[str, Any]:
        self.start_worker(mode)
        warm = api.post("/v1/studies", self.document(f"warm-up before {mode}", 1, False, {"name": "random", "seed": 1}))
        rs.wait_study(api, warm["id"], time.monotonic() + self.args.preflight_s)
        runners_wait_s = rs.wait_runners_ready(self.work, mode, time.monotonic() + 60)
        sampler = {"name": "nsga2", "seed": self.args.seed, "options": {"population_size": 10}}
        study = api.post("/v1/studies", self.document(f"GEMM {mode}", self.args.trials, mode == "screen", sampler))
        self.log(f"{mode}: study {study['id']} created")
        rs.wait_study(api, study["id"], until)
        self.stop_worker()
        data = rs.collect(api, study["id"])
        data["runners_wait_s"] = runners_wait_s
        self.log(f"{mode}: {data['study']['state']} ({data['study'].get('finish_reason')}), "
                 f"progress {data['study']['progress']}")
        return data

    # -- re-measurement ---------------------------------------------------------------------

    def head_to_head(self, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        versus = self.work / "versus.json"
        versus.write_text(json.dumps(configs))
        out = self.out / "h2h.json"
        measure, compile_ = rs.cpu_sets(0, 1)
        cpus = [int(c) for c in f"{measure},{compile_}".split(",") if c]
        command = [sys.executable, str(REPO / "bench" / "gpu" / "sweep.py"), "--kernel", self.builtin,
                   "--backend", self.backend, "--versus", str(versus), "--only-versus", "--rounds",
                   str(self.args.rounds), "--cache", str(self.cache_dirs[0]), "--out", str(out),
                   "--deadline-s", f"{max(5.0, self.deadline - 10 - time.monotonic()):.0f}",
                   "--objectives", ",".join(self.objectives), "--settings", json.dumps(self.measure)]
        self.log(f"head to head of {list(configs)}")
        process = rs.spawn(command, env={**self.env, "CUDA_VISIBLE_DEVICES": "0"}, cwd=REPO,
                           preexec_fn=lambda: os.sched_setaffinity(0, cpus),
                           stdout=open(self.work / "h2h.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        try:
            process.wait(timeout=max(5.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            self.log("head to head stopped at the deadline (the rounds done are kept)")
        return json.loads(out.read_text()).get("head_to_head", {}) if out.exists() else {}

    def run(self) -> dict[str, Any]:
        api = self.start_service()
        order = self.args.order.split(",")
        studies: dict[str, dict[str, Any]] = {}
        for index, mode in enumerate(order):
            left = self.deadline - self.args.h2h_s - time.monotonic()
            # the full study takes about 0.6 of the time both take
            share = 1.0 if index == len(order) - 1 else (0.6 if mode == "full" else 0.4)
            studies[mode] = self.run_study(api, mode, time.monotonic() + left * share)
        configs = self.versus_configs(studies)
        h2h = self.head_to_head(configs)
        result = {"args": vars(self.args), "objectives": self.objectives, "measure": self.measure,
                  "studies": studies, "versus": configs, "head_to_head": h2h,
                  "elapsed_s": time.monotonic() - self.started}
        (self.out / "screening_compare.json").write_text(json.dumps(result, default=str))
        (self.out / "logs.txt").write_text(rs.log_tails(self.work, 30000))
        return result

    def versus_configs(self, studies: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each distinct configuration once, by the first name that wants it."""
        wanted: list[tuple[str, dict[str, Any]]] = []
        if not self.local:
            wanted.append(("sweep_best", rs.SWEEP_BEST))
        base = next((t for t in studies[next(iter(studies))]["trials"] if t["is_baseline"]), None)
        if base:
            wanted.append(("baseline", base["config"]))
        for mode, data in studies.items():
            best = best_trial(data)
            if best:
                wanted.append((f"{mode}_best", best["config"]))
        for trial in studies.get("screen", {}).get("front", {}).get("trials", []):
            wanted.append((f"screen_front_{trial['number']}", trial["config"]))
        configs: dict[str, dict[str, Any]] = {}
        for name, config in wanted:
            if config not in configs.values():
                configs[name] = config
        return configs


# --- the summary (pure: reads what run() wrote) ----------------------------------------------


def best_trial(data: dict[str, Any]) -> dict[str, Any] | None:
    done = [t for t in data["trials"] if t["state"] == "completed" and t.get("values")]
    return min(done, key=lambda t: t["values"]["runtime_ms"]) if done else None


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def run_wall_s(trial: dict[str, Any]) -> float:
    """The check-and-measure wall time of a trial's stages (a screened-out trial's `timings`
    are its screen's; a promoted one's are its full stage's, its screen's in `screening`)."""
    seconds = float((trial.get("timings") or {}).get("run_wall_s", 0.0))
    if trial.get("stage") == "full":
        seconds += float(((trial.get("screening") or {}).get("timings") or {}).get("run_wall_s", 0.0))
    return seconds


def throughput(data: dict[str, Any]) -> dict[str, Any]:
    """Trials finished over the span from the study's creation (its worker already warm, so
    its first lease follows at once) to its last result."""
    trials = [t for t in data["trials"] if t.get("finished_at")]
    if not trials:
        return {"trials": 0}
    span = (max(_time(t["finished_at"]) for t in trials) - _time(data["study"]["created_at"])).total_seconds()
    gpu_s = sum(run_wall_s(t) for t in data["trials"])
    states: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for t in data["trials"]:
        states[t["state"]] = states.get(t["state"], 0) + 1
        if t["state"] == "failed":
            reason = str(t.get("failure_reason"))
            reasons[reason] = reasons.get(reason, 0) + 1
    return {"trials": len(trials), "span_s": span, "trials_per_gpu_minute": len(trials) / span * 60 if span else None,
            "run_phase_gpu_s": gpu_s, "gpu_s_per_trial": gpu_s / len(trials), "states": states,
            "failure_reasons": reasons,
            "gpu_busy": gpu_s / span if span else None, "stage_timings": stage_timings(data)}


def stage_timings(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Median seconds of each part of a trial, per stage (screen, full), from the workers' timings."""
    found: dict[str, dict[str, list[float]]] = {}
    for trial in data["trials"]:
        stage = trial.get("stage") or "full"
        stages = [(stage, trial.get("timings") or {})]
        if stage == "full" and trial.get("screening"):  # a promoted trial: its screen's timings too
            stages.append(("screen", trial["screening"].get("timings") or {}))
        for stage, timings in stages:
            for name, value in timings.items():
                if isinstance(value, int | float):
                    found.setdefault(stage, {}).setdefault(name, []).append(float(value))
    return {stage: {name: statistics.median(values) for name, values in parts.items()}
            for stage, parts in found.items()}


def time_to_two_percent(data: dict[str, Any], sweep: dict[str, Any]) -> dict[str, Any]:
    """From the study's creation to the first fully measured trial whose configuration the
    recorded sweep puts within 2% of its best."""
    recorded = {json.dumps(r["config"], sort_keys=True): r["values"]["runtime_ms"]
                for r in sweep["rows"] if r.get("status") == "completed"}
    best = min(recorded.values())
    created = _time(data["study"]["created_at"])
    hits = sorted((_time(t["finished_at"]), t["number"]) for t in data["trials"]
                  if t["state"] == "completed" and t.get("finished_at")
                  and recorded.get(json.dumps(t["config"], sort_keys=True), float("inf")) <= 1.02 * best)
    if not hits:
        return {"reached": False}
    return {"reached": True, "seconds": (hits[0][0] - created).total_seconds(), "trial": hits[0][1]}


def front_order(data: dict[str, Any], h2h: dict[str, Any], objectives: list[str],
                versus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether the screening study's front members, re-measured, rank as the study ranked them."""
    names = {json.dumps(c, sort_keys=True): n for n, c in versus.items()}
    members = data.get("front", {}).get("trials", [])
    out: dict[str, Any] = {"members": [m["number"] for m in members]}
    for objective in objectives:
        measured = []
        for m in members:
            values = h2h.get("values", {}).get(names.get(json.dumps(m["config"], sort_keys=True), ""), [])
            if values:
                measured.append((m["values"][objective], statistics.median(v[objective] for v in values), m["number"]))
        by_study = [n for _, _, n in sorted(measured)]
        by_remeasure = [n for _, _, n in sorted(measured, key=lambda x: x[1])]
        out[objective] = {"study_order": by_study, "remeasured_order": by_remeasure, "kept": by_study == by_remeasure}
    return out


def summarize(result: dict[str, Any], local: bool) -> str:
    studies, h2h = result["studies"], result["head_to_head"]
    medians = h2h.get("median_runtime_ms", {})
    sweep = None if local else json.loads(SWEEP.read_text())
    lines = ["| | " + " | ".join(studies) + " |", "| --- |" + " --- |" * len(studies)]
    rows: dict[str, list[str]] = {}
    names = {json.dumps(c, sort_keys=True): n for n, c in result["versus"].items()}
    for data in studies.values():
        tp = throughput(data)
        best = best_trial(data)
        rows.setdefault("trials finished (states)", []).append(f"{tp['trials']} {json.dumps(tp.get('states'))}")
        rows.setdefault("failed trials by reason", []).append(json.dumps(tp.get("failure_reasons")))
        rows.setdefault("waited for the worker's runners' warm-up before the study, s", []).append(
            f"{data.get('runners_wait_s', 0):.1f}")
        rows.setdefault("span from the study's creation to its last result, s", []).append(f"{tp.get('span_s', 0):.1f}")
        rows.setdefault("trials per GPU-minute", []).append(f"{tp.get('trials_per_gpu_minute') or 0:.1f}")
        rows.setdefault("run-phase GPU seconds per trial", []).append(f"{tp.get('gpu_s_per_trial', 0):.2f}")
        rows.setdefault("share of the span the GPU ran a trial", []).append(f"{tp.get('gpu_busy') or 0:.2f}")
        rows.setdefault("median seconds per stage (compile wall, check, measure, run wall)", []).append("; ".join(
            f"{stage}: " + ", ".join(f"{parts.get(k, float('nan')):.2f}"
                                     for k in ("compile_wall_s", "check_s", "measure_s", "run_wall_s"))
            for stage, parts in sorted(tp.get("stage_timings", {}).items())))
        rows.setdefault("best runtime_ms (config)", []).append(
            f"{best['values']['runtime_ms']:.4f} (`{json.dumps(best['config'])}`)" if best else "-")
        name = names.get(json.dumps(best["config"], sort_keys=True)) if best else None
        rows.setdefault("its re-measured runtime_ms over the sweep best's (same GPU)", []).append(
            f"{medians[name] / medians['sweep_best'] - 1:+.4f}" if name in medians and "sweep_best" in medians else "-")
        rows.setdefault("front size", []).append(str(len(data["front"]["trials"])))
        if sweep is not None:
            hit = time_to_two_percent(data, sweep)
            rows.setdefault("wall time to a trial within 2% of the sweep's best, s", []).append(
                f"{hit['seconds']:.1f} (trial {hit['trial']})" if hit["reached"] else "not reached")
    for label, values in rows.items():
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    tpm = {m: throughput(d).get("trials_per_gpu_minute") for m, d in studies.items()}
    if tpm.get("screen") and tpm.get("full"):
        lines.append(f"\nScreening over full measurement, trials per GPU-minute: {tpm['screen'] / tpm['full']:.2f}x")
    if "screen" in studies:
        order = front_order(studies["screen"], h2h, result["objectives"], result["versus"])
        lines.append(f"\nThe screening study's front re-measured ({h2h.get('rounds')} interleaved rounds): "
                     + json.dumps(order))
    lines.append(f"\nHead-to-head medians (runtime_ms): {json.dumps(medians)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trials", type=int, default=67)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--order", default="full,screen", help="which study runs first")
    parser.add_argument("--energy-runtime-ratio", type=float, default=1.1,
                        help="the screening study's measure.promote.energy_runtime_ratio (0: the default)")
    parser.add_argument("--parallelism", type=int, default=2, help="both studies' parallelism")
    parser.add_argument("--lease-ahead", type=int, default=1, help="the worker's --lease-ahead")
    parser.add_argument("--compilers", type=int, default=1, help="the worker's --compilers")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the re-measurement")
    parser.add_argument("--deadline-s", type=float, default=430)
    parser.add_argument("--h2h-s", type=float, default=80, help="kept for the re-measurement at the end")
    parser.add_argument("--preflight-s", type=float, default=60)
    parser.add_argument("--local", action="store_true", help="the cpu backend, to test the script without a GPU")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rs.OUT = out
    result = rs.run_logged(Compare(args, out))
    text = summarize(result, args.local)
    (out / "screening_compare.md").write_text(text + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    main()
