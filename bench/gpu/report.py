"""Turn what bench/gpu/run_studies.py wrote (studies.json, h2h_gpu<N>.json or sweep.json,
driver.log, console.txt) into the results in bench/results/: per kernel a markdown file and a
JSON summary (gpu_<kernel><suffix>.md/.json), plus the raw data (trial logs and repeated
fingerprints dropped). Trial throughput is compared with an earlier run's studies.json
(--before). Where the run swept the GEMM's space itself (sweep.json), the sweep and its
head-to-head come from there; otherwise from the recorded sweep below.

    python bench/gpu/report.py RUN_DIR --command "..." --machine "..." --label "run 7" \
        [--suffix _run7] [--raw gpu_raw_2026-11-29_run7] [--before OLD/studies.json] [--notes notes.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

DATE = "2026-11-29"
OBJECTIVES = ("runtime_ms", "energy_mj", "p99_ms")
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
# The latest recorded exhaustive sweep, for runs that do not sweep themselves.
RECORDED_SWEEP = RESULTS / "gpu_raw_2026-11-29_run6" / "sweep.json"


def spread(values: list[float]) -> float | None:
    return max(values) / min(values) - 1.0 if len(values) >= 2 else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def completed(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in trials if t["state"] == "completed" and t.get("values")]


def hot_env(trial: dict[str, Any]) -> dict[str, Any]:
    shapes = (trial.get("environment") or {}).get("shapes", {})
    first = next(iter(shapes.values()), {}) if isinstance(shapes, dict) else {}
    return first.get("hot", {}) if isinstance(first, dict) else {}


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


# --- throughput --------------------------------------------------------------------------


def throughput(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Trials per minute over the span they ran in, and where a trial's time went."""
    timed = [t for t in trials if t.get("started_at") and t.get("finished_at")]
    result: dict[str, Any] = {"trials_finished": len(timed)}
    if len(timed) >= 2:
        span = (max(when(t["finished_at"]) for t in timed) - min(when(t["started_at"]) for t in timed)).total_seconds()
        result["span_s"] = span
        result["trials_per_minute"] = len(timed) / span * 60 if span > 0 else None
    for key in ("run_wall_s", "check_s", "measure_s", "compile_wall_s"):
        values = [float(t["timings"][key]) for t in trials if key in (t.get("timings") or {})]
        result[f"median_{key}"] = median(values)
    return result


def pool_throughput(data: dict[str, Any]) -> dict[str, Any]:
    """Every trial its worker ran for this kernel: the study's and the repeats'."""
    trials = list(data.get("trials", [])) + [t for r in data.get("repeats", []) for t in r["trials"]]
    return throughput(trials)


def runner_stats(trials: list[dict[str, Any]]) -> dict[str, Any]:
    run = [(t.get("environment") or {}).get("sandbox") or {} for t in trials]
    comp = [(t.get("compile_report") or {}).get("sandbox") or {} for t in trials]
    run_pids = [s["pid"] for s in run if s.get("warm") and s.get("pid")]
    comp_pids = [s["pid"] for s in comp if s.get("warm") and s.get("pid")]
    return {
        "warm_trials": sum(1 for s in run if s.get("warm")),
        "fresh_trials": sum(1 for s in run if s and not s.get("warm")),
        "run_runner_processes": len(set(run_pids)),
        "most_trials_one_run_runner": max((s.get("trials_served") or 0 for s in run), default=0),
        "compile_runner_processes": len(set(comp_pids)),
        "median_run_runner_warm_up_s": median([s["warm_up_s"] for s in run if s.get("warm_up_s") is not None]),
        "runner_warm_up_errors": sorted({s["warm_up_error"] for s in run + comp if s.get("warm_up_error")}),
    }


# --- one kernel --------------------------------------------------------------------------


def repeat_summary(data: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for repeat in data.get("repeats", []):
        for trial in completed(repeat["trials"]):
            power = (trial.get("metrics") or {}).get("power_w", {}).get("value")
            rows.append(
                {"study": repeat["study"]["id"], "started_at": trial["started_at"], **trial["values"], "power_w": power}
            )
    summary: dict[str, Any] = {
        "measurements": rows,
        "config": "the kernel's baseline (default) configuration, one-trial studies in the same pool",
        "repeat_studies": len(data.get("repeats", [])),
    }
    for name in OBJECTIVES:
        summary[f"{name}_spread"] = spread([r[name] for r in rows if r.get(name) is not None])
    return summary


def gpu_text(run: dict[str, Any], kernel: str, trials: list[dict[str, Any]]) -> str:
    device = next(((t.get("environment") or {}).get("device") for t in trials if t.get("environment")), {}) or {}
    fingerprint = next((t.get("fingerprint") for t in trials if t.get("fingerprint")), {}) or {}
    gpu = fingerprint.get("gpu_index", run["roles"][kernel])
    power = device.get("power_limit_w")
    return (
        f"{device.get('name', 'NVIDIA H200')} (GPU {gpu} of a {run['gpus']}-GPU host"
        f"{', ' + fingerprint['gpu_uuid'] if fingerprint.get('gpu_uuid') else ''}), power limit "
        f"{'?' if power is None else f'{power:.0f}'} W, driver {device.get('driver', '?')}, "
        f"torch {device.get('torch', '?')}"
    )


def trials_to_within(trials: list[dict[str, Any]], target: float, slack: float = 0.02) -> int | None:
    """The number of trials (1-based, in order) after which the study's best runtime was
    first within `slack` of `target`."""
    running = float("inf")
    for index, trial in enumerate(sorted(trials, key=lambda t: t["number"]), start=1):
        if trial["state"] == "completed" and trial.get("values"):
            running = min(running, trial["values"]["runtime_ms"])
            if running <= target * (1 + slack):
                return index
    return None


def head_to_head(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data = json.loads(path.read_text()).get("head_to_head") or {}
    values = data.get("values", {})
    summary: dict[str, Any] = {
        "rounds": data.get("rounds"),
        "stopped": data.get("stopped"),
        "configs": data.get("configs"),
        "median_runtime_ms": data.get("median_runtime_ms", {}),
        "runtime_spread": {k: spread([v["runtime_ms"] for v in vals]) for k, vals in values.items()},
        "energy_spread": {k: spread([v["energy_mj"] for v in vals if "energy_mj" in v]) for k, vals in values.items()},
        "median_energy_mj": {
            k: median([v["energy_mj"] for v in vals if "energy_mj" in v]) for k, vals in values.items()
        },
        "values": values,
        "failures": [
            {"round": r["round"], "name": r["name"], "status": r.get("status"), "message": r.get("message")}
            for r in data.get("rows", [])
            if r.get("status") != "completed"
        ],
    }
    medians = summary["median_runtime_ms"]
    if "sweep_best" in medians and "study_best" in medians:
        summary["study_best_over_sweep_best"] = medians["study_best"] / medians["sweep_best"] - 1.0
        summary["within_2pct"] = summary["study_best_over_sweep_best"] <= 0.02
    if "sweep_best" in medians and "baseline" in medians:
        summary["sweep_best_over_baseline"] = medians["sweep_best"] / medians["baseline"]
    return summary


def kernel_summary(run: dict[str, Any], kernel: str, args: argparse.Namespace, before: dict | None) -> dict[str, Any]:
    data = run["studies"][kernel]
    study, trials, front = data["study"], data["trials"], data["front"]
    doc = study["document"]
    done = completed(trials)
    baseline = next((t for t in done if t["is_baseline"]), None)
    best = min(done, key=lambda t: t["values"]["runtime_ms"]) if done else None
    progress = study["progress"]
    summary: dict[str, Any] = {
        "kernel": doc["kernel"]["builtin"],
        "gpu": gpu_text(run, kernel, trials),
        "date": DATE,
        "machine": args.machine,
        "command": args.command,
        "stack": "paretune service (SQLite) + one `paretune worker` agent per GPU (--gpu N, its own CPU sets, warm "
        "runners), all from this repository",
        "sampler": doc["sampler"],
        "measure": doc["measure"],
        "workload": doc["kernel"].get("workload") or "the built-in's",
        "objectives": [o["name"] for o in study["objectives"]],
        "trials": progress["created"],
        "trials_finished": progress["completed"] + progress["failed"],
        "trials_completed": progress["completed"],
        "trials_failed": progress["failed"],
        "study_state": f"{study['state']} ({study['finish_reason']})",
        "failure_reasons": _count(t["failure_reason"] for t in trials if t["state"] == "failed"),
        "baseline_config": baseline["config"] if baseline else None,
        "baseline_runtime_ms": baseline["values"]["runtime_ms"] if baseline else None,
        "baseline_energy_mj": baseline["values"].get("energy_mj") if baseline else None,
        "baseline_p99_ms": baseline["values"].get("p99_ms") if baseline else None,
        "best_runtime_ms": best["values"]["runtime_ms"] if best else None,
        "best_runtime_config": best["config"] if best else None,
        "best": study["best"],
        "best_over_baseline": {k: study["best"][k] / study["baseline"][k] for k in study["best"]}
        if study.get("baseline") and study.get("best")
        else None,
        "energy_method": args.energy_method or energy_method(trials),
        "front_size": len(front["trials"]),
        "front": [{"number": t["number"], "config": t["config"], **t["values"]} for t in front["trials"]],
        "hypervolume": study["hypervolume"],
        "hypervolume_reference": {
            "ratio_to_baseline": front["reference_point"],
            "raw": front.get("reference_point_raw"),
        },
    }
    repeats = repeat_summary(data)
    summary["repeat_runtime_spread"] = repeats["runtime_ms_spread"]
    summary["repeat_energy_spread"] = repeats["energy_mj_spread"]
    summary["repeat_p99_spread"] = repeats["p99_ms_spread"]
    summary["repeats"] = repeats
    summary["throughput"] = {
        "this_run": {"study": throughput(trials), "worker": pool_throughput(data), "runners": runner_stats(trials)},
    }
    if before is not None and kernel in before["studies"]:
        old = before["studies"][kernel]
        summary["throughput"]["earlier_run_per_trial_processes"] = {
            "study": throughput(old["trials"]),
            "worker": pool_throughput(old),
        }
    if kernel == "gemm":
        fresh = Path(args.run_dir) / "sweep.json"
        if fresh.exists():
            summary.update(fresh_sweep(fresh, f"GPU {run['roles']['gemm']} of this run, after the study"))
        else:
            summary.update(fresh_sweep(RECORDED_SWEEP, "run 6's, on another machine's GPU"))
        sweep_best = summary["sweep_best_runtime_ms"]
        summary["study_trials_to_within_2pct_of_sweep_best"] = trials_to_within(trials, sweep_best)
        if best:
            summary["study_best_over_sweep_best"] = best["values"]["runtime_ms"] / sweep_best - 1.0
        h2h = (
            {run["roles"]["gemm"]: head_to_head(fresh)}
            if fresh.exists()
            else {gpu: head_to_head(Path(args.run_dir) / f"h2h_gpu{gpu}.json") for gpu in run.get("versus_gpus", [0])}
        )
        summary["head_to_head"] = {f"gpu{gpu}": value for gpu, value in h2h.items() if value is not None}
        study_gpu = h2h.get(run["roles"]["gemm"])
        if study_gpu and "sweep_best" in study_gpu["median_runtime_ms"]:
            reference = study_gpu["median_runtime_ms"]["sweep_best"]
            summary["sweep_best_on_study_gpu_ms"] = reference
            summary["study_trials_to_within_2pct"] = trials_to_within(trials, reference)
            summary["study_best_over_sweep_best_same_gpu"] = study_gpu.get("study_best_over_sweep_best")
    return summary


def fresh_sweep(path: Path, where: str) -> dict[str, Any]:
    """The numbers of a recorded sweep (sweep.json of a run that swept the space)."""
    data = json.loads(path.read_text())
    rows = data.get("rows", [])
    best = data.get("best") or {}
    return {
        "sweep_best_runtime_ms": (best.get("values") or {}).get("runtime_ms"),
        "sweep_best_config": best.get("config"),
        "sweep_evaluations": data.get("evaluations", len(rows)),
        "sweep_completed": data.get("completed"),
        "sweep_failed": _count(r["status"] for r in rows if r.get("status") != "completed"),
        "sweep_gpu": f"{where}; measurement settings {json.dumps(data.get('settings'))}",
        "sweep_seconds": data.get("sweep_seconds"),
        "sweep_stopped": data.get("stopped"),
        "sweep_top": [
            {"config": r["config"], "runtime_ms": r["values"]["runtime_ms"]}
            for r in sorted(
                (r for r in rows if r.get("status") == "completed"), key=lambda r: r["values"]["runtime_ms"]
            )[:8]
        ],
    }


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


# --- markdown ----------------------------------------------------------------------------


def fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return "-" if value is None else str(value)


def _throughput_rows(summary: dict[str, Any]) -> list[str]:
    rows = [
        "| run | scope | trials finished | span s | trials per minute | median run wall s | median check s | "
        "median measure s | median compile wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    labels = {
        "earlier_run_per_trial_processes": "earlier run (a process per trial phase)",
        "this_run": "this run (warm runners)",
    }
    for run_key in ("earlier_run_per_trial_processes", "this_run"):
        block = summary["throughput"].get(run_key)
        if not block:
            continue
        for scope in ("study", "worker"):
            t = block[scope]
            rows.append(
                f"| {labels[run_key]} | {'study trials' if scope == 'study' else 'all trials of its worker'} | "
                f"{t['trials_finished']} | {fmt(t.get('span_s'), 0)} | {fmt(t.get('trials_per_minute'), 1)} | "
                f"{fmt(t.get('median_run_wall_s'), 2)} | {fmt(t.get('median_check_s'), 2)} | "
                f"{fmt(t.get('median_measure_s'), 2)} | {fmt(t.get('median_compile_wall_s'), 2)} |"
            )
    return rows


def markdown(
    summary: dict[str, Any], trials: list[dict[str, Any]], notes: list[str], earlier: str, runs: list[str]
) -> str:
    lines = [
        f"# {summary['kernel']} on the H200: study through the whole stack ({summary['label']})",
        "",
        f"- date: {summary['date']}",
        f"- GPU: {summary['gpu']}",
        f"- machine: {summary['machine']}",
        f"- stack: {summary['stack']}",
        f"- command: `{summary['command']}`",
        f"- workload: `{json.dumps(summary['workload'])}`",
        f"- objectives: {', '.join(summary['objectives'])}; sampler `{json.dumps(summary['sampler'])}`",
        f"- measurement settings: `{json.dumps(summary['measure'])}` (docs/measurement.md)",
        f"- all runs of this kernel: [{earlier}]({earlier})",
        "",
        "## Summary",
        "",
        "| | value |",
        "| --- | --- |",
        f"| trials (created / finished / completed / failed) | {summary['trials']} / {summary['trials_finished']} / "
        f"{summary['trials_completed']} / {summary['trials_failed']} |",
        f"| study state | {summary['study_state']} |",
        f"| failure reasons | {json.dumps(summary['failure_reasons'])} |",
        f"| baseline config | `{json.dumps(summary['baseline_config'])}` |",
        f"| baseline runtime_ms / energy_mj / p99_ms | {fmt(summary['baseline_runtime_ms'])} / "
        f"{fmt(summary['baseline_energy_mj'], 2)} / {fmt(summary['baseline_p99_ms'])} |",
        f"| best runtime_ms (config) | {fmt(summary['best_runtime_ms'])} "
        f"(`{json.dumps(summary['best_runtime_config'])}`) |",
        "| best per objective over baseline | "
        + ", ".join(f"{k} {v:.3f}" for k, v in (summary["best_over_baseline"] or {}).items())
        + " |",
        f"| front size | {summary['front_size']} |",
        "| hypervolume (objectives as ratios to the baseline, reference point 2.0 each) | "
        f"{fmt(summary['hypervolume'])} |",
        f"| repeats of the baseline: measurements / spread (max/min - 1) runtime, energy, p99 | "
        f"{len(summary['repeats']['measurements'])} / {fmt(summary['repeat_runtime_spread'])}, "
        f"{fmt(summary['repeat_energy_spread'])}, {fmt(summary['repeat_p99_spread'])} |",
    ]
    if "head_to_head" in summary:
        lines += [
            f"| sweep: evaluations / completed / failed | {summary['sweep_evaluations']} / "
            f"{summary['sweep_completed']} / {json.dumps(summary['sweep_failed'])} |",
            f"| sweep best runtime_ms (config; {summary['sweep_gpu']}) | "
            f"{fmt(summary['sweep_best_runtime_ms'])} (`{json.dumps(summary['sweep_best_config'])}`) |",
            f"| study best over sweep best, each as measured in its own run of the harness | "
            f"{fmt(summary.get('study_best_over_sweep_best'))} |",
            f"| trials until the study's best was within 2% of the sweep's best | "
            f"{fmt(summary.get('study_trials_to_within_2pct_of_sweep_best'))} |",
            f"| sweep's best configuration measured on the study's GPU after it (head-to-head median) | "
            f"{fmt(summary.get('sweep_best_on_study_gpu_ms'))} |",
            "| study best over sweep best, head to head: same GPU, interleaved | "
            f"{fmt(summary.get('study_best_over_sweep_best_same_gpu'))} |",
            f"| trials until the study's best was within 2% of the head-to-head's sweep best | "
            f"{fmt(summary.get('study_trials_to_within_2pct'))} |",
        ]
    lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    if runs:
        lines += ["", "## Every run of this kernel", "", *runs]
    lines += ["", "## Trial throughput", "", *_throughput_rows(summary)]
    runners = summary["throughput"]["this_run"]["runners"]
    lines += [
        "",
        f"Runners in this run: {runners['warm_trials']} trials checked and measured in warm runners "
        f"({runners['fresh_trials']} in fresh processes), {runners['run_runner_processes']} run-runner processes "
        f"(one served up to {runners['most_trials_one_run_runner']} trials; a runner is replaced after any failed "
        f"trial), {runners['compile_runner_processes']} compile-runner processes; median run-runner warm-up "
        f"{fmt(runners['median_run_runner_warm_up_s'], 1)} s"
        + (f"; warm-up errors: {runners['runner_warm_up_errors']}" if runners["runner_warm_up_errors"] else "")
        + ".",
    ]
    for gpu, h2h in (summary.get("head_to_head") or {}).items():
        lines += [
            "",
            f"## Head to head on {gpu} ({h2h['rounds']} interleaved rounds, in the same run after the study)",
            "",
            "| name | config | runtime_ms (each round) | median runtime_ms | runtime spread | median energy_mj | "
            "energy spread |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, values in h2h["values"].items():
            rounds = ", ".join(fmt(v["runtime_ms"]) for v in values)
            lines.append(
                f"| {name} | `{json.dumps(h2h['configs'][name])}` | {rounds} | "
                f"{fmt(h2h['median_runtime_ms'].get(name))} | "
                f"{fmt(h2h['runtime_spread'].get(name))} | {fmt(h2h['median_energy_mj'].get(name), 2)} | "
                f"{fmt(h2h['energy_spread'].get(name))} |"
            )
        lines += ["", f"Study best over sweep best on {gpu}: {fmt(h2h.get('study_best_over_sweep_best'))}."]
        if h2h.get("failures"):
            lines.append(f"Failed evaluations: {json.dumps(h2h['failures'])}.")
        if h2h.get("stopped"):
            lines.append(f"Stopped: {h2h['stopped']}.")
    lines += [
        "",
        "## Pareto front",
        "",
        "| trial | config | " + " | ".join(summary["objectives"]) + " |",
        "| --- | --- | " + " | ".join("---" for _ in summary["objectives"]) + " |",
    ]
    for row in summary["front"]:
        lines.append(
            f"| {row['number']} | `{json.dumps(row['config'])}` | "
            + " | ".join(fmt(row.get(o), 2 if o == "energy_mj" else 4) for o in summary["objectives"])
            + " |"
        )
    lines += [
        "",
        "## Repeats of the baseline configuration, spread across the study",
        "",
        "| repeat study | started | runtime_ms | energy_mj | p99_ms | power_w |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in summary["repeats"]["measurements"]:
        lines.append(
            f"| {row['study']} | {row['started_at']} | {fmt(row.get('runtime_ms'))} | {fmt(row.get('energy_mj'), 2)} | "
            f"{fmt(row.get('p99_ms'))} | {fmt(row.get('power_w'), 0)} |"
        )
    lines += [
        "",
        "## All trials (raw numbers)",
        "",
        "| # | state | config | runtime_ms | energy_mj | p99_ms | power_w | SM MHz (median) | throttle | run wall s | "
        "runner pid |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for trial in sorted(trials, key=lambda t: t["number"]):
        values = trial.get("values") or {}
        metrics = trial.get("metrics") or {}
        hot = hot_env(trial)
        sandbox = (trial.get("environment") or {}).get("sandbox") or {}
        state = trial["state"] if trial["state"] != "failed" else f"failed: {trial['failure_reason']}"
        lines.append(
            f"| {trial['number']} | {state} | `{json.dumps(trial['config'])}` | {fmt(values.get('runtime_ms'))} | "
            f"{fmt(values.get('energy_mj'), 2)} | {fmt(values.get('p99_ms'))} | "
            f"{fmt((metrics.get('power_w') or {}).get('value'), 0)} | "
            f"{fmt((hot.get('sm_clock_mhz') or {}).get('median'), 0)} | "
            f"{','.join(hot.get('throttle_reasons') or []) or '-'} | "
            f"{fmt((trial.get('timings') or {}).get('run_wall_s'), 2)} | {fmt(sandbox.get('pid'))} |"
        )
    return "\n".join(lines) + "\n"


# --- every run of a kernel --------------------------------------------------------------


def energy_method(trials: list[dict[str, Any]]) -> str:
    """How the run charged window energy to calls: counted between the ticks, or the span at
    the mean call time (runs before calls were counted). A workload of several shapes keeps
    only the shapes' values, so it cannot tell (--energy-method)."""
    for trial in completed(trials):
        stats = ((trial.get("metrics") or {}).get("energy_mj") or {}).get("stats") or {}
        if stats and "shape0" not in stats:
            return "counted calls" if "calls" in stats else "span at mean call time"
    return "-"


def run_row(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One line of the runs table from a kernel summary (older summaries use other keys)."""
    h2h = summary.get("study_best_over_sweep_best_same_gpu")
    if h2h is None and summary.get("head_to_head_one_gpu"):
        medians = summary["head_to_head_one_gpu"]["median_runtime_ms"]
        h2h = medians["study_best"] / medians["sweep_best"] - 1.0
    own = summary.get("study_best_over_sweep_best", summary.get("study_gap_to_sweep_best"))
    if own is None and summary.get("best_runtime_ms") and summary.get("sweep_best_runtime_ms"):
        own = summary["best_runtime_ms"] / summary["sweep_best_runtime_ms"] - 1.0
    return {
        "run": name,
        "hot_window_s": (summary.get("measure") or {}).get("hot_window_s"),
        "energy": summary.get("energy_method", "span at mean call time"),
        "sampler": summary.get("sampler"),
        "trials": summary.get("trials"),
        "baseline_runtime_ms": summary.get("baseline_runtime_ms"),
        "best_runtime_ms": summary.get("best_runtime_ms"),
        "front_size": summary.get("front_size"),
        "hypervolume": summary.get("hypervolume"),
        "repeat_runtime_spread": summary.get("repeat_runtime_spread"),
        "repeat_energy_spread": summary.get("repeat_energy_spread"),
        "repeat_p99_spread": summary.get("repeat_p99_spread"),
        "study_best_over_sweep_best": own,
        "study_best_over_sweep_best_head_to_head": h2h,
    }


def all_runs(out: Path, name: str, current: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(out.glob(f"gpu_{name}_run*.json"), key=lambda p: int(p.stem.rsplit("_run", 1)[1])):
        summary = json.loads(path.read_text())
        if summary.get("label") == current["label"]:
            continue  # the run this file is written for comes last
        rows.append(run_row(summary.get("label") or "run " + path.stem.rsplit("_run", 1)[1], summary))
        if summary.get("run3_gemm_only"):  # run 3 was recorded inside run 2's summary
            run3 = summary["run3_gemm_only"]
            rows.append(
                run_row(
                    "run 3",
                    {**run3, "measure": summary.get("measure"), "repeat_runtime_spread": None,
                     "repeat_energy_spread": None, "repeat_p99_spread": None,
                     "sweep_best_runtime_ms": summary.get("sweep_best_runtime_ms")},
                )
            )  # fmt: skip
    rows.append(run_row(current["label"], current))
    return rows


def runs_markdown(rows: list[dict[str, Any]], gemm: bool) -> list[str]:
    head = (
        "| run | hot window s | energy per call | sampler | trials | baseline -> best runtime_ms | front | "
        "hypervolume | repeats: runtime / energy / p99 spread |"
    )
    rule = "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    if gemm:
        head += " study best over sweep best (as measured) | same, head to head on one GPU |"
        rule += " --- | --- |"
    lines = [head, rule]
    for r in rows:
        line = (
            f"| {r['run']} | {fmt(r['hot_window_s'], 1)} | {r['energy']} | `{json.dumps(r['sampler'])}` | "
            f"{fmt(r['trials'])} | {fmt(r['baseline_runtime_ms'])} -> {fmt(r['best_runtime_ms'])} | "
            f"{fmt(r['front_size'])} | {fmt(r['hypervolume'], 3)} | {fmt(r['repeat_runtime_spread'])} / "
            f"{fmt(r['repeat_energy_spread'])} / {fmt(r['repeat_p99_spread'])} |"
        )
        if gemm:
            line += f" {fmt(r['study_best_over_sweep_best'])} | {fmt(r['study_best_over_sweep_best_head_to_head'])} |"
        lines.append(line)
    if gemm:
        lines += [
            "",
            "Study best over sweep best, as measured: the study's best value over the sweep's best value. Runs 4 "
            "and 6 swept the space themselves, on the study's GPU after the study; runs 1-3 compare with run 1's "
            "sweep and runs 5 and 7 with run 6's, each on another GPU than the study's (so a percent either way can "
            "be the GPUs, not the search). Head to head: the study's best and the sweep's best configuration "
            "measured alternately, five rounds each, on the study's GPU after the study (0.0000 where the study "
            "found the sweep's best configuration itself).",
        ]
    return lines


def slim(run: dict[str, Any]) -> dict[str, Any]:
    for data in run["studies"].values():
        for trial in data.get("trials", []) + [t for r in data.get("repeats", []) for t in r["trials"]]:
            trial.pop("log", None)
            trial.pop("fingerprint", None)
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--raw", default=f"gpu_raw_{DATE}_warm", help="folder under --out for the raw files")
    parser.add_argument("--energy-method", default="", help="for multi-shape workloads: 'counted calls' or ...")
    parser.add_argument("--kernels", default="", help="only these of the run's kernels (comma separated)")
    parser.add_argument("--suffix", default="", help="gpu_<kernel><suffix>.md/.json")
    parser.add_argument("--label", default="", help="the run's name in the headings, e.g. 'run 7'")
    parser.add_argument("--before", type=Path, default=None, help="an earlier run's studies.json")
    parser.add_argument("--notes", type=Path, default=None, help='JSON {"gemm": ["note", ...], ...}')
    parser.add_argument("--command", required=True)
    parser.add_argument("--machine", required=True)
    args = parser.parse_args()
    run = json.loads((args.run_dir / "studies.json").read_text())
    before = json.loads(args.before.read_text()) if args.before else None
    notes = json.loads(args.notes.read_text()) if args.notes else {}
    raw = args.out / args.raw
    raw.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for kernel, data in run["studies"].items():
        if "study" not in data or (args.kernels and kernel not in args.kernels.split(",")):
            continue
        summary = {"label": args.label, "raw": f"bench/results/{args.raw}/"}
        summary.update(kernel_summary(run, kernel, args, before))
        summaries[kernel] = summary
        name = summary["kernel"]
        table: list[str] = []
        if not args.suffix:  # the kernel's main file: every run of it, this one last
            rows = all_runs(args.out, name, summary)
            summary["runs"] = rows
            table = runs_markdown(rows, kernel == "gemm")
        (args.out / f"gpu_{name}{args.suffix}.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        (args.out / f"gpu_{name}{args.suffix}.md").write_text(
            markdown(summary, data["trials"], notes.get(kernel, []), f"gpu_{name}.md", table)
        )
    (raw / "studies.json").write_text(json.dumps(slim(run), default=str))
    for path in sorted(args.run_dir.glob("h2h_gpu*.json")) + [
        args.run_dir / n
        for n in ("driver.log", "stdout.txt", "console.txt", "gpus.csv", "sweep.json", "energy_window.json")
    ]:
        if path.exists():
            (raw / path.name).write_text(path.read_text())
    for kernel, s in summaries.items():
        t = s["throughput"]["this_run"]["study"]
        print(
            f"{kernel:10} trials {s['trials']} done {s['trials_finished']} best {fmt(s['best_runtime_ms'])} base "
            f"{fmt(s['baseline_runtime_ms'])} front {s['front_size']} hv {fmt(s['hypervolume'])} rep "
            f"{fmt(s['repeat_runtime_spread'])}/{fmt(s['repeat_energy_spread'])} "
            f"tpm {fmt(t.get('trials_per_minute'), 1)}"
        )


if __name__ == "__main__":
    main()
