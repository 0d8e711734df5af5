"""Exhaustive sweep of a built-in GPU kernel's space through the same backend harness the
worker uses (compile, check on fresh random inputs, measure hot and cold), in one process.

Configurations run in a shuffled order (fixed seed) so that slow drift in clocks or
temperature does not line up with any parameter. Compiled artifacts come from the worker's
artifact cache when present (same cache keys), else are compiled here. Afterwards, when a
file names other configurations (e.g. a study's best), those and the sweep's best are
measured head to head, interleaved, for a like-for-like comparison on this GPU.

    python3 bench/gpu/sweep.py --kernel gemm_bf16 --cache DIR --out sweep.json \
        [--deadline-s 400] [--versus FILE --versus-wait-s 120] [--shard I/N] [--workload '[{"dims": {...}}]']

`--skip FILE...` leaves out the configurations those sweep files hold (a stopped shard goes on
where it stopped); `--compile-only` only fills the artifact cache, so that several processes
compile on the CPUs ahead of the one that measures.

`--shard I/N` sweeps every N-th configuration of the shuffled order from the I-th (0-based),
so that N processes, one per GPU, or several shorter runs sweep a space too large for one
call together (RMSNorm: 1,152 points); their `rows` joined are the whole sweep, and the
replay reads the slices' files together. `--workload` replaces the built-in's shapes (a JSON
list of {"dims": {...}, "weight": w}), e.g. to sweep the GEMM at another shape for a
warm-start replay.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.contract import FailureReason, KernelSpec, MeasureSettings  # noqa: E402
from wire.failures import TrialFailure  # noqa: E402
from wire.kernels import get_builtin  # noqa: E402
from wire.space import BoolParam, CategoricalParam, Parameter  # noqa: E402
from workers.backends import get_backend  # noqa: E402
from workers.cache import ArtifactCache  # noqa: E402
from workers.sandbox.files import write_whole  # noqa: E402

OBJECTIVES = ["runtime_ms", "energy_mj", "p99_ms"]  # --objectives changes it


def space_points(space: list[Parameter]) -> list[dict[str, Any]]:
    values: list[list[Any]] = []
    for param in space:
        if isinstance(param, CategoricalParam):
            values.append(param.choices)
        elif isinstance(param, BoolParam):
            values.append([False, True])
        else:
            raise ValueError(f"cannot sweep {param.type} parameter {param.name}")
    names = [p.name for p in space]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


class Harness:
    def __init__(
        self,
        backend_name: str,
        builtin: str,
        cache: ArtifactCache,
        settings: MeasureSettings,
        known_failures: dict[str, str] | None = None,
        workload: list[dict[str, Any]] | None = None,
    ) -> None:
        self.known_failures = known_failures or {}
        self.backend = get_backend(backend_name)
        # the compiler, not the resource model, decides what cannot launch: the sweep is what
        # the model is checked against (tests/workers/test_resources.py)
        self.spec = KernelSpec.model_validate({"backend": backend_name, "builtin": builtin,
                                               "options": {"resource_model": False},
                                               **({"workload": workload} if workload else {})})
        self.cache = cache
        self.settings = settings

    def built(self, config: dict[str, Any]) -> tuple[Any, bool]:
        key = self.backend.cache_key(self.spec, config)
        if key in self.known_failures:  # the worker-side compile of this key already failed
            raise TrialFailure(FailureReason.COMPILE_ERROR, self.known_failures[key])
        hit = self.cache.lookup(key)
        if hit is not None:
            return hit, True
        staging = self.cache.staging()
        try:
            built = self.backend.compile(self.spec, config, staging)
        except BaseException:
            self.cache.discard(staging)
            raise
        return self.cache.commit(key, built), False

    def evaluate(self, config: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"config": config}
        started = time.perf_counter()
        try:
            built, cached = self.built(config)
            row["cached"] = cached
            outcome = self.backend.check(self.spec, config, built)
            row["correct"] = outcome.passed
            row["rel_err"] = outcome.details.get("max_rel_l2_err")
            if not outcome.passed:
                row["status"] = "wrong_result"
                return row
            metrics, environment = self.backend.measure(self.spec, config, built, OBJECTIVES, self.settings)
            row["status"] = "completed"
            row["values"] = {k: m.value for k, m in metrics.items()}
            row["ci"] = {k: [m.ci_low, m.ci_high] for k, m in metrics.items()}
            hot = _first_hot(environment)
            row["sm_clock_mhz"] = hot.get("sm_clock_mhz")
            row["throttle"] = hot.get("throttle_reasons")
        except TrialFailure as failure:
            row["status"] = failure.reason.value
            row["message"] = failure.message[:300]
        finally:
            row["seconds"] = time.perf_counter() - started
        return row


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replaced whole, so that a sweep killed while saving leaves its last complete file."""
    write_whole(path, json.dumps(data, default=str))


def recorded_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier sweep file; none (and a warning) when it is missing or unreadable."""
    try:
        return list(json.loads(path.read_text())["rows"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--skip {path}: not used ({type(exc).__name__}: {exc})", flush=True)
        return []


def compile_ahead(harness: Harness, points: list[dict[str, Any]], deadline: float) -> None:
    """Compile into the artifact cache only; a configuration that does not compile is left
    for the sweep, which records why."""
    built = failed = 0
    for config in points:
        if time.monotonic() > deadline:
            break
        try:
            harness.built(config)
            built += 1
        except Exception:
            failed += 1
    print(json.dumps({"compiled": built, "failed": failed, "of": len(points)}), flush=True)


def _first_hot(environment: dict[str, Any]) -> dict[str, Any]:
    """The first shape's hot-window environment (GPU backends; empty for others)."""
    shapes = environment.get("shapes")
    first = next(iter(shapes.values()), {}) if isinstance(shapes, dict) else {}
    hot = first.get("hot", {}) if isinstance(first, dict) else {}
    return hot if isinstance(hot, dict) else {}


def head_to_head(
    harness: Harness,
    configs: dict[str, dict[str, Any]],
    rounds: int,
    deadline: float = float("inf"),
    on_round: Any = None,
) -> dict[str, Any]:
    """Each configuration measured `rounds` times, interleaved A B A B ..., the order of
    the configurations turned by one each round; stops early (whole rounds) at `deadline`."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"rounds": 0, "configs": configs, "values": results, "rows": rows}
    names = list(configs)
    for index in range(rounds):
        if time.monotonic() > deadline:
            summary["stopped"] = f"deadline after {index} of {rounds} rounds"
            break
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            row = harness.evaluate(configs[name])
            rows.append({"round": index, "name": name, **row})
            if row.get("status") == "completed":
                results[name].append(row["values"])
        summary["rounds"] = index + 1
        _medians(summary)
        if on_round is not None:
            on_round(summary)
    return summary


def _medians(summary: dict[str, Any]) -> None:
    for name, values in summary["values"].items():
        if values:
            runtimes = sorted(v["runtime_ms"] for v in values)
            summary.setdefault("median_runtime_ms", {})[name] = runtimes[len(runtimes) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", default="gemm_bf16")
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--cache", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--deadline-s", type=float, default=400.0)
    parser.add_argument("--hot-window-s", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--versus", default=None)
    parser.add_argument("--versus-wait-s", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only-versus", action="store_true", help="no sweep: head to head of --versus configs")
    parser.add_argument("--failures", default=None, help="JSON {cache_key: message}")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--settings", default=None, help="measurement settings as JSON (default: the sweep's)")
    parser.add_argument("--workload", default=None, help="shapes as JSON (default: the built-in's)")
    parser.add_argument("--shard", default="0/1", help="I/N: every N-th configuration from the I-th")
    parser.add_argument("--skip", nargs="*", default=[], help="sweep files whose rows are not evaluated again")
    parser.add_argument("--compile-only", action="store_true",
                        help="only fill the artifact cache (run several at once, on CPUs, ahead of the sweep)")
    args = parser.parse_args()
    shard, shards = (int(part) for part in args.shard.split("/"))
    OBJECTIVES[:] = args.objectives.split(",")
    started = time.monotonic()
    deadline = started + args.deadline_s
    builtin = get_builtin(args.backend, args.kernel)
    assert builtin is not None
    settings = (
        MeasureSettings.model_validate(json.loads(args.settings))
        if args.settings
        else MeasureSettings(
            warmup_s=0.1, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=args.hot_window_s
        )
    )
    failures = json.loads(Path(args.failures).read_text()) if args.failures else {}
    workload = json.loads(args.workload) if args.workload else None
    harness = Harness(args.backend, args.kernel, ArtifactCache(Path(args.cache)), settings, failures, workload)
    if args.only_versus:
        configs = json.loads(Path(args.versus).read_text())
        result: dict[str, Any] = {"kernel": args.kernel, "settings": settings.model_dump(), "started": time.time()}

        def save(summary: dict[str, Any]) -> None:  # after every round: a kill leaves the rounds done
            result["head_to_head"] = summary
            write_json(Path(args.out), result)

        save(head_to_head(harness, configs, args.rounds, deadline, on_round=save))
        print(json.dumps(result["head_to_head"].get("median_runtime_ms")), flush=True)
        return
    points = space_points(builtin.space)
    space_size = len(points)
    random.Random(args.seed).shuffle(points)
    points = points[shard::shards]
    done_before = {json.dumps(row["config"], sort_keys=True) for path in args.skip for row in recorded_rows(Path(path))}
    points = [p for p in points if json.dumps(p, sort_keys=True) not in done_before]
    if args.compile_only:
        compile_ahead(harness, points, deadline)
        return
    out = Path(args.out)
    report: dict[str, Any] = {
        "kernel": args.kernel,
        "space_size": space_size,
        "shard": args.shard,
        "workload": workload or builtin.workload,
        "settings": settings.model_dump(),
        "rows": [],
    }
    for index, config in enumerate(points):
        if time.monotonic() > deadline:
            report["stopped"] = f"deadline after {index} of {len(points)} configurations"
            break
        row = harness.evaluate(config)
        report["rows"].append(row)
        if index % 10 == 0:
            write_json(out, report)
            print(
                f"sweep {index + 1}/{len(points)} {row.get('status')} {row.get('values', {}).get('runtime_ms')}",
                flush=True,
            )
    done = [r for r in report["rows"] if r.get("status") == "completed"]
    report["evaluations"] = len(report["rows"])
    report["completed"] = len(done)
    if done:
        best = min(done, key=lambda r: r["values"]["runtime_ms"])
        report["best"] = best
        report["sweep_seconds"] = time.monotonic() - started
        if args.versus:
            versus = Path(args.versus)
            wait_until = min(deadline + args.versus_wait_s, time.monotonic() + args.versus_wait_s)
            while not versus.exists() and time.monotonic() < wait_until:
                time.sleep(2)
            if versus.exists():
                others = json.loads(versus.read_text())
                report["head_to_head"] = head_to_head(harness, {"sweep_best": best["config"], **others}, args.rounds)
    write_json(out, report)
    print(json.dumps({k: report.get(k) for k in ("evaluations", "completed", "stopped")}))


if __name__ == "__main__":
    main()
