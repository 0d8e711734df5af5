"""Does trial isolation change what the worker measures on a GPU? The built-in Triton GEMM's
baseline configuration (gemm_bf16, 4096^3 bf16) goes through the worker's real sandbox code
(workers.sandbox.stages.execute_trial with warm runners, as the agent runs triton trials: compile
runner, then check + measure in the run runner, pinned to one GPU and one CPU) at two
isolation levels, interleaved round after round (A B, then B A, ...): `none` (the agent's
own user, rlimits only) and `namespaces` (bubblewrap: own mount, PID, IPC, UTS and network
namespaces, an unprivileged uid, the GPU device nodes bound in). It prints runtime_ms and
energy_mj per round, each level's median and repeat spread (max - min), and whether the
isolated medians lie within the repeat spread of the unisolated ones; it writes JSON.

The GPU machine runs as root, has no bubblewrap package and cannot reach the network, so
the bwrap binary travels in the repository tree, in an ignored folder. Prepare it here once:

    bench/gpu/fetch_bwrap.sh               # Debian 12's bubblewrap and its libraries (.bwrap)
    bench/gpu/fetch_wheels.sh              # the worker's Python packages the image lacks (.whl)

Then on the GPU machine, carrying .bwrap and .whl:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu/isolation_check.py --bwrap .bwrap/bwrap \\
        --rounds 6 --out $OUT/isolation_check.json

If the host refuses namespaces (a container runtime without them), the script says so with
bwrap's own message and measures `none` alone. `--local` runs the same on the cpu
backend's matmul here, to test the script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.contract import KernelSpec, MeasureSettings, SandboxLimits, TrialSpec  # noqa: E402
from wire.kernels import get_builtin  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.fingerprint import usable_cpus  # noqa: E402
from workers.sandbox.context import Context  # noqa: E402
from workers.sandbox.isolation import IsolationUnavailable, choose  # noqa: E402
from workers.sandbox.limits import caps  # noqa: E402
from workers.sandbox.runner import RunnerPool  # noqa: E402
from workers.sandbox.sandbox import Sandbox  # noqa: E402
from workers.sandbox.stages import execute_trial  # noqa: E402

# run_studies.py's GPU profile: what the worker measures in the GEMM studies
GPU_MEASURE = MeasureSettings(warmup_s=0.1, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=1.6)
LOCAL_MEASURE = MeasureSettings(warmup_s=0.005, min_repeats=10, max_repeats=200, target_s=0.05, hot_window_s=0.1)
LEVELS = ("none", "namespaces")


def trial(backend: str, builtin: str, objectives: list[str], settings: MeasureSettings, number: int) -> TrialSpec:
    kernel = get_builtin(backend, builtin)
    assert kernel is not None
    return TrialSpec(
        trial_id=number + 1, study_id=1, number=number, attempt=1, is_baseline=True,
        kernel=KernelSpec(backend=backend, builtin=builtin), config=dict(kernel.default_config),
        objectives=objectives, compile_timeout_s=600, run_timeout_s=600, measure=settings,
    )


class Level:
    """One isolation level's sandbox, warm runners and artifact cache, as an agent has them."""

    def __init__(self, name: str, args: argparse.Namespace, work: Path) -> None:
        self.name = name
        # --gpu is the physical index, as the agent's; without it the trials see what this
        # process sees (a CUDA_VISIBLE_DEVICES set around it is kept, not replaced by GPU 0)
        overrides = {"CUDA_VISIBLE_DEVICES": str(args.gpu)} if args.gpu is not None and not args.local else {}
        limits = {"memory_mb": args.max_memory_mb} if args.max_memory_mb else {}
        self.sandbox = Sandbox(caps=caps(SandboxLimits(**limits)), work_root=work / name, env_overrides=overrides)
        self.sandbox.isolation = choose(name, work_root=self.sandbox.root, hidden=[], bwrap=args.bwrap)
        self.cache = ArtifactCache(work / f"cache-{name}")
        self.runners = RunnerPool(self.sandbox.root / "runners", sandbox=self.sandbox, warm_for=lambda b: True)

    def run(self, spec: TrialSpec, cpus: dict[str, list[int]]) -> dict[str, Any]:
        started = time.perf_counter()
        context = Context(self.cache, self.sandbox, self.runners, compile_cpus=cpus["compile"],
                          run_cpus=cpus["measure"])
        result = execute_trial(spec, context)
        assert result is not None
        row: dict[str, Any] = {"level": self.name, "status": result.status, "wall_s": time.perf_counter() - started,
                               "message": result.message[:500], "timings": result.timings,
                               "cached": result.compile_report.get("cached")}
        for name, metric in result.metrics.items():
            row[name] = metric.value
            row[f"{name}_ci"] = [metric.ci_low, metric.ci_high]
        shapes = result.environment.get("shapes", {})
        first: dict[str, Any] = next(iter(shapes.values()), {}) if isinstance(shapes, dict) else {}
        hot = first.get("hot", {}) if isinstance(first, dict) else {}
        row["sm_clock_mhz"] = (hot.get("sm_clock_mhz") or {}).get("median") if isinstance(hot, dict) else None
        row["sandbox"] = result.environment.get("sandbox", {})
        if result.status != "completed":
            row["log"] = result.log[-3000:]
        return row

    def close(self) -> None:
        self.runners.close()
        self.sandbox.close()


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    median = statistics.median(values)
    return {"median": median, "min": min(values), "max": max(values), "spread": max(values) - min(values),
            "spread_rel": (max(values) - min(values)) / median if median else 0.0, "n": len(values)}


def verdict(summary: dict[str, dict[str, dict[str, float]]], metrics: list[str]) -> dict[str, Any]:
    """Per metric: the isolated median's distance from the unisolated one, against the
    repeat spread of either level (the larger)."""
    out: dict[str, Any] = {}
    if not all(level in summary for level in LEVELS):
        return out
    for metric in metrics:
        plain, isolated = summary["none"].get(metric), summary["namespaces"].get(metric)
        if not plain or not isolated:
            continue
        difference = isolated["median"] - plain["median"]
        allowed = max(plain["spread"], isolated["spread"])
        out[metric] = {"difference": difference, "difference_rel": difference / plain["median"],
                       "repeat_spread": allowed, "within_spread": abs(difference) <= allowed}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (after one warm-up round)")
    parser.add_argument("--bwrap", default=None, help="the bubblewrap binary (default: bwrap on PATH)")
    parser.add_argument("--gpu", type=int, default=None, help="the GPU (physical index; default: as visible here)")
    parser.add_argument("--max-memory-mb", type=int, default=None, help="the memory cap (default: the worker's)")
    parser.add_argument("--out", type=Path, default=Path("isolation_check.json"))
    parser.add_argument("--local", action="store_true", help="the cpu backend's matmul, to test the script")
    args = parser.parse_args()
    backend, builtin = ("cpu", "matmul") if args.local else ("triton", "gemm_bf16")
    objectives = ["runtime_ms"] if args.local else ["runtime_ms", "energy_mj", "power_w"]
    settings = LOCAL_MEASURE if args.local else GPU_MEASURE
    cpus = usable_cpus()
    placement = {"measure": cpus[-1:], "compile": cpus[:-1] or cpus}
    work = Path(tempfile.mkdtemp(prefix="isolation-check-"))
    report: dict[str, Any] = {"kernel": f"{backend}/{builtin}", "objectives": objectives, "rounds": [],
                              "measure": settings.model_dump(), "euid": os.geteuid(), "levels": {}}
    levels: dict[str, Level] = {}
    for name in LEVELS:
        try:
            levels[name] = Level(name, args, work)
            report["levels"][name] = levels[name].sandbox.isolation.describe()
        except IsolationUnavailable as exc:
            report["levels"][name] = {"unavailable": str(exc)}
            print(f"ISOLATION LEVEL {name!r} IS NOT AVAILABLE HERE: {exc}", flush=True)
    try:
        number = 0
        for round_index in range(args.rounds + 1):
            order = list(levels.values()) if round_index % 2 == 0 else list(reversed(levels.values()))
            for level in order:
                row = level.run(trial(backend, builtin, objectives, settings, number), placement)
                number += 1
                row["round"] = round_index
                row["warm_up"] = round_index == 0
                report["rounds"].append(row)
                print(json.dumps({k: row.get(k) for k in ("round", "level", "status", *objectives, "sm_clock_mhz",
                                                           "wall_s", "message")}, default=str), flush=True)
                args.out.write_text(json.dumps(report, indent=1, default=str))
    finally:
        for level in levels.values():
            level.close()
    measured = [r for r in report["rounds"] if not r["warm_up"] and r["status"] == "completed"]
    report["summary"] = {name: {m: spread([r[m] for r in measured if r["level"] == name and m in r])
                                for m in objectives} for name in levels}
    report["verdict"] = verdict(report["summary"], objectives)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print_table(report, objectives)


def print_table(report: dict[str, Any], objectives: list[str]) -> None:
    print(f"\n{report['kernel']}, baseline configuration; levels: "
          + ", ".join(f"{k}: {v.get('level', 'unavailable')}" for k, v in report["levels"].items()))
    print(f"{'round':>5} {'level':11} {'status':9} " + " ".join(f"{m:>12}" for m in objectives) + f" {'clock':>6}")
    for row in report["rounds"]:
        values = " ".join(f"{row[m]:12.5f}" if m in row else f"{'-':>12}" for m in objectives)
        clock = f"{row['sm_clock_mhz']:6.0f}" if row.get("sm_clock_mhz") else f"{'-':>6}"
        label = f"{row['round']}{'w' if row['warm_up'] else ''}"
        print(f"{label:>5} {row['level']:11} {row['status']:9} {values} {clock}")
    print(f"\n{'level':11} {'metric':12} {'median':>12} {'spread':>12} {'spread %':>9} {'n':>3}")
    for level, metrics in report["summary"].items():
        for metric, s in metrics.items():
            if s:
                print(f"{level:11} {metric:12} {s['median']:12.5f} {s['spread']:12.5f} "
                      f"{100 * s['spread_rel']:8.2f}% {s['n']:3d}")
    for metric, v in report["verdict"].items():
        print(f"{metric}: namespaces - none = {v['difference']:+.5f} ({100 * v['difference_rel']:+.2f}%), "
              f"repeat spread {v['repeat_spread']:.5f}: {'WITHIN' if v['within_spread'] else 'OUTSIDE'} the spread")


if __name__ == "__main__":
    main()
