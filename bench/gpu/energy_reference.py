"""A trial's energy and power against a long steady-state reference, kernel by kernel.

For each kernel (a built-in, a built-in on another workload, or any kernel from
`--kernel-file`), in interleaved rounds (default 3; the order of the kernels turns each
round, and trial and reference swap places every other round):

- trial: an idle gap as between two trials (`--gap-s`), then the backend's own `measure`
  as a worker runs it (the study's GPU settings: 0.1 s warm-up, `--hot-window-s` 1.6), its
  reported `power_w` and `energy_mj`, and beside them the first-to-last-tick estimate the
  harness used before (from the trial's environment);
- reference: an idle gap, then the same configuration replayed back to back for
  `--reference-s` (20 s; a workload's shapes share it, each at least 10 s) with NVML sampled
  (`workers.measure.gpu_harness.reference_workload`): the counter's energy between ticks
  well inside the run (2 s after its start to 0.5 s before its end, whole controller
  periods) over the calls counted in that time, and mean power; a workload's shapes
  combine as the trial combines them.

It prints per round trial W, reference W, trial and reference mJ per call and their ratios,
then per kernel the median ratio over the rounds and the largest deviation of any round, and
writes everything (with each trial's and reference's environment) as JSON. The criterion of
issue 13: median within 1%, no round over 2%.

On the GPU machine (wheels as in bench/gpu/isolation_check.py's docstring):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 bench/gpu/energy_reference.py --out $OUT/energy_reference.json

    --kernels gemm_bf16,rmsnorm     a subset of KERNELS (or of the kernel file's names)
    --kernel-file kernels.json      other kernels: [{"name", "backend", "builtin" | "source"
                                    + "entry", "workload", "options", "config"}, ...]
    --reference-s 20 --rounds 3 --gap-s 1.0 --hot-window-s 1.6
    --analyse energy_reference.json prints the tables of a recorded run again

`--local` runs the same rounds, estimators and tables on a simulated power-capped GPU
(`workers.measure.nvml_sim`, one simulated device per built-in, each tick phase, counter
lag and warm-up drawn at random), where the steady state is also known exactly: it tests
this script without a GPU and shows the first-to-last-tick estimate's bias.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from service.studies.documents import ENERGY_HOT_WINDOW_S, ENERGY_WARMUP_S  # noqa: E402
from wire.contract import KernelSpec, MeasureSettings  # noqa: E402
from workers.measure.gpu_aggregate import ShapeSamples, workload_metrics  # noqa: E402
from workers.measure.gpu_harness import combine_references, hot_energy, reference_result  # noqa: E402
from workers.measure.nvml_sim import PowerCappedGpu, simulate_run  # noqa: E402

# The three built-in GPU kernels as studies measure them, and a memory-bound decode GEMM:
# M = 64 rows against an 8192 x 8192 bf16 matrix (128 MB, twice the L2) streamed each call.
KERNELS: dict[str, dict[str, Any]] = {
    "gemm_bf16": {"backend": "triton", "builtin": "gemm_bf16"},
    "attention_fwd": {"backend": "triton", "builtin": "attention_fwd"},
    "rmsnorm": {"backend": "cuda", "builtin": "rmsnorm"},
    "gemm_m64": {
        "backend": "triton",
        "builtin": "gemm_bf16",
        "workload": [{"dims": {"m": 64, "n": 8192, "k": 8192}, "weight": 1.0}],
        "config": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3},
    },
}
OBJECTIVES = ["runtime_ms", "energy_mj", "power_w"]
MEDIAN_WITHIN, ROUND_WITHIN = 0.01, 0.02
MIN_SHAPE_REFERENCE_S = 10.0  # a workload of several shapes shares the reference time, down to this each


def shape_reference_s(reference_s: float, shapes: int) -> float:
    """Seconds of back-to-back replay for each of a workload's shapes."""
    return min(reference_s, max(reference_s / max(shapes, 1), MIN_SHAPE_REFERENCE_S))

# --local: one simulated device per shape, like the kernels on the H200 (compute-bound at
# the cap, memory-bound far above it with short calls, RMSNorm below it).
SIMULATED: dict[str, list[tuple[float, PowerCappedGpu]]] = {
    "gemm_bf16": [(1.0, PowerCappedGpu(busy_w=730.0, busy_rate=4000.0))],
    "attention_fwd": [
        (0.7, PowerCappedGpu(busy_w=725.0, busy_rate=900.0)),
        (0.3, PowerCappedGpu(busy_w=720.0, busy_rate=220.0)),
    ],
    "rmsnorm": [(1.0, PowerCappedGpu(busy_w=650.0, busy_rate=12000.0))],
    "gemm_m64": [(1.0, PowerCappedGpu(busy_w=800.0, busy_rate=35000.0))],
}


def as_reference(energy_mj: float, power_w: float) -> dict[str, float]:
    return {"energy_mj": energy_mj, "seconds_per_call": energy_mj / 1000.0 / power_w}


def combine_edges(edges: list[dict[str, Any]], weights: list[float]) -> dict[str, float]:
    """The shapes' first-to-last-tick estimates, combined as the trial's metrics are."""
    return combine_references([as_reference(e["edge_mj"], e["edge_power_w"]) for e in edges], weights)


# -- one trial and one reference, on the GPU ----------------------------------------------


class GpuBench:
    """Compiles each kernel once (checked once), then measures it as a trial and as a
    reference through its backend."""

    def __init__(self, kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
        from workers.backends import get_backend
        from workers.cache import ArtifactCache

        self.settings = MeasureSettings(
            warmup_s=args.warmup_s, min_repeats=20, max_repeats=2000, target_s=0.2, hot_window_s=args.hot_window_s
        )
        cache = ArtifactCache(Path(args.cache))
        self.prepared: dict[str, tuple[Any, KernelSpec, dict[str, Any], Any, list[float]]] = {}
        self.failed: dict[str, str] = {}
        for name, entry in kernels.items():
            try:
                backend = get_backend(entry["backend"])
                spec = KernelSpec(**{k: v for k, v in entry.items() if k not in ("name", "config")})
                config = dict(entry.get("config") or {})
                key = backend.cache_key(spec, config)
                built = cache.lookup(key) or cache.commit(key, backend.compile(spec, config, cache.staging()))
                outcome = backend.check(spec, config, built)
                if not outcome.passed:
                    raise RuntimeError(f"fails its correctness check: {outcome.details}")
            except Exception as exc:  # one kernel that cannot run leaves the others to measure
                self.failed[name] = f"{type(exc).__name__}: {exc}"[:2000]
                print(f"{name}: SKIPPED, {self.failed[name]}", flush=True)
                continue
            self.prepared[name] = (backend, spec, config, built, self._weights(spec, entry))
            print(f"{name}: compiled and checked", flush=True)

    @staticmethod
    def _weights(spec: KernelSpec, entry: dict[str, Any]) -> list[float]:
        from workers.backends.gpu_loader import resolve

        return [shape.weight for shape in resolve(spec, dict(entry.get("config") or {}), entry["backend"]).workload]

    def trial(self, name: str, gap_s: float, warmup_s: float | None = None) -> dict[str, Any]:
        backend, spec, config, built, weights = self.prepared[name]
        settings = self.settings if warmup_s is None else self.settings.model_copy(update={"warmup_s": warmup_s})
        time.sleep(gap_s)
        metrics, environment = backend.measure(spec, config, built, OBJECTIVES, settings)
        if "energy_mj" not in metrics or "power_w" not in metrics:
            return {"error": environment.get("energy_error", "no energy"), "environment": environment}
        shapes = [shape["hot"] for shape in environment["shapes"].values()]
        edges = [s.get("energy", {}) for s in shapes]
        row: dict[str, Any] = {
            "power_w": metrics["power_w"].value,
            "energy_mj": metrics["energy_mj"].value,
            "runtime_ms": metrics["runtime_ms"].value,
            "periods": [e.get("periods") for e in edges],
            "environment": environment,
        }
        if all("edge_mj" in e for e in edges):
            edge = combine_edges(edges, weights)
            row.update(edge_power_w=edge["power_w"], edge_energy_mj=edge["energy_mj"])
        return row

    def reference(self, name: str, gap_s: float, seconds: float) -> dict[str, Any]:
        from workers.measure import gpu_harness

        backend, spec, config, built, weights = self.prepared[name]
        seconds = shape_reference_s(seconds, len(weights))
        captured: dict[str, Any] = {}
        measure_workload = gpu_harness.measure_workload

        def reference_instead(shapes: Any, objectives: Any, settings: Any) -> tuple[dict, dict]:
            captured["result"], captured["environment"] = gpu_harness.reference_workload(
                shapes, seconds, settings.warmup_s
            )
            return {}, captured["environment"]

        time.sleep(gap_s)
        gpu_harness.measure_workload = reference_instead  # the backend's launches, replayed for long
        try:
            backend.measure(spec, config, built, OBJECTIVES, self.settings)
        finally:
            gpu_harness.measure_workload = measure_workload
        if captured.get("result") is None:
            return {"error": "no reference energy", "environment": captured.get("environment")}
        return {**captured["result"], "shape_s": seconds, "environment": captured["environment"]}


# -- the same on the simulated device -----------------------------------------------------


class SimulatedBench:
    def __init__(self, kernels: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
        self.rng = random.Random(args.seed)
        self.hot_window_s = args.hot_window_s
        self.kernels = {name: SIMULATED[name] for name in kernels}

    def _device(self, gpu: PowerCappedGpu) -> tuple[PowerCappedGpu, float]:
        """The device with this run's tick phase and counter lag, and the run's warm-up."""
        from dataclasses import replace

        phase, lag = self.rng.uniform(0.0, 0.1), self.rng.uniform(0.0, 0.05)
        return replace(gpu, tick_phase_s=phase, lag_s=lag), self.rng.uniform(0.1, 0.2)

    def truth(self, name: str) -> dict[str, float]:
        shapes = self.kernels[name]
        results = [as_reference(g.steady_energy_per_call_mj(), g.steady_power_w()) for _, g in shapes]
        return combine_references(results, [w for w, _ in shapes])

    def trial(self, name: str, gap_s: float, warmup_s: float | None = None) -> dict[str, Any]:
        samples: list[ShapeSamples] = []
        edges: list[dict[str, Any]] = []
        weights: list[float] = []
        for weight, gpu in self.kernels[name]:
            device, warmup = self._device(gpu)
            run = simulate_run(device, self.hot_window_s, warmup_s=warmup if warmup_s is None else warmup_s)
            sample = ShapeSamples(str(len(samples)), weight, hot_ms=run.per_call_ms, hot_mean_ms=run.mean_call_ms)
            replays = (run.replay_ms, run.calls_per_replay)
            edges.append(hot_energy(sample, run.readings, run.busy_start, run.busy_end, *replays))
            samples.append(sample)
            weights.append(weight)
        metrics = workload_metrics(samples, OBJECTIVES)
        edge = combine_edges(edges, weights)
        return {
            "power_w": metrics["power_w"].value,
            "energy_mj": metrics["energy_mj"].value,
            "runtime_ms": metrics["runtime_ms"].value,
            "periods": [e["periods"] for e in edges],
            "edge_power_w": edge["power_w"],
            "edge_energy_mj": edge["energy_mj"],
        }

    def reference(self, name: str, gap_s: float, seconds: float) -> dict[str, Any]:
        results, weights = [], []
        shape_s = shape_reference_s(seconds, len(self.kernels[name]))
        for weight, gpu in self.kernels[name]:
            device, warmup = self._device(gpu)
            run = simulate_run(device, shape_s, warmup_s=warmup)
            result = reference_result(run.readings, run.busy_start, run.busy_end, run.replay_ms, run.calls_per_replay)
            if result is None:
                return {"error": "no reference energy"}
            results.append(result)
            weights.append(weight)
        return {**combine_references(results, weights), "shape_s": shape_s, "shapes": results}


# -- rounds, table, summary ---------------------------------------------------------------


def run_rounds(bench: Any, names: list[str], args: argparse.Namespace, report: dict[str, Any]) -> None:
    if not names:
        print("no kernel to measure", flush=True)
        return
    for index in range(args.rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            order = ("trial", "reference") if index % 2 == 0 else ("reference", "trial")
            row: dict[str, Any] = {"kernel": name, "round": index, "order": list(order)}
            for what in order:
                started = time.perf_counter()
                if what == "trial":
                    warmups = args.trial_warmups or [None]
                    variants = {str(w): bench.trial(name, args.gap_s, w) for w in warmups}
                    row["trial"] = variants[str(warmups[0])]
                    if len(variants) > 1:
                        row["trial_warmups"] = variants
                else:
                    row["reference"] = bench.reference(name, args.gap_s, args.reference_s)
                row[f"{what}_wall_s"] = time.perf_counter() - started
            report["rows"].append(row)
            print_row(row)
            if args.out:
                Path(args.out).write_text(json.dumps(report, indent=1, default=str))


def ratios(row: dict[str, Any]) -> dict[str, float] | None:
    trial, reference = row.get("trial", {}), row.get("reference", {})
    if "power_w" not in trial or "power_w" not in reference:
        return None
    out = {
        "power": trial["power_w"] / reference["power_w"],
        "energy": trial["energy_mj"] / reference["energy_mj"],
    }
    if "edge_power_w" in trial:
        out["edge_power"] = trial["edge_power_w"] / reference["power_w"]
        out["edge_energy"] = trial["edge_energy_mj"] / reference["energy_mj"]
    for warmup, variant in list(row.get("trial_warmups", {}).items())[1:]:  # the first is `trial`
        if "power_w" in variant:
            out[f"power_warmup_{warmup}"] = variant["power_w"] / reference["power_w"]
            out[f"energy_warmup_{warmup}"] = variant["energy_mj"] / reference["energy_mj"]
    return out


HEADER = (
    f"{'kernel':14} {'rnd':>3} {'trial W':>8} {'ref W':>8} {'trial mJ':>10} {'ref mJ':>10} "
    f"{'W ratio':>8} {'mJ ratio':>8} {'edge W':>8} {'edge mJ':>8}"
)


def print_row(row: dict[str, Any]) -> None:
    trial, reference, r = row.get("trial", {}), row.get("reference", {}), ratios(row)
    if r is None:
        print(f"{row['kernel']:14} {row['round']:>3} error: {trial.get('error') or reference.get('error')}", flush=True)
        return
    print(
        f"{row['kernel']:14} {row['round']:>3} {trial['power_w']:8.1f} {reference['power_w']:8.1f} "
        f"{trial['energy_mj']:10.4f} {reference['energy_mj']:10.4f} {r['power']:8.4f} {r['energy']:8.4f} "
        f"{r.get('edge_power', float('nan')):8.4f} {r.get('edge_energy', float('nan')):8.4f}",
        flush=True,
    )


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kernel and quantity: the median ratio over rounds, the largest deviation of a
    round, and whether the criterion holds (median within 1%, no round over 2%)."""
    summary: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(row["kernel"] for row in rows):
        found = [r for row in rows if row["kernel"] == name and (r := ratios(row)) is not None]
        entry: dict[str, Any] = {"rounds": len(found)}
        for quantity in dict.fromkeys(q for r in found for q in r):
            values = [r[quantity] for r in found if quantity in r]
            if not values:
                continue
            median = statistics.median(values)
            worst = max(values, key=lambda v: abs(v - 1.0))
            entry[quantity] = {
                "median": median,
                "worst": worst,
                "passes": abs(median - 1.0) <= MEDIAN_WITHIN and abs(worst - 1.0) <= ROUND_WITHIN,
            }
        summary[name] = entry
    return summary


def print_summary(summary: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'kernel':14} {'rounds':>6} {'quantity':18} {'median':>8} {'worst':>8}  within 1% / 2%")
    for name, entry in summary.items():
        for quantity in [q for q in entry if q != "rounds"]:
            if quantity in entry:
                q = entry[quantity]
                print(
                    f"{name:14} {entry['rounds']:>6} {quantity:18} {q['median']:8.4f} {q['worst']:8.4f}  "
                    f"{'yes' if q['passes'] else 'NO'}"
                )


def load_kernels(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    kernels = dict(KERNELS)
    if args.kernel_file:
        kernels = {entry["name"]: entry for entry in json.loads(Path(args.kernel_file).read_text())}
    if args.kernels:
        wanted = [name.strip() for name in args.kernels.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in kernels]
        if unknown:
            raise SystemExit(f"--kernels: unknown {unknown}; known: {sorted(kernels)}")
        kernels = {name: kernels[name] for name in wanted}
    if args.local:
        missing = [name for name in kernels if name not in SIMULATED]
        if missing:
            raise SystemExit(f"--local simulates {sorted(SIMULATED)} only, not {missing}")
    return kernels


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--kernel-file", default=None, help="JSON list of kernels to use instead of KERNELS")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--reference-s", type=float, default=20.0, help="seconds of back-to-back replay (shapes share it, >= 10 s each)"
    )
    # the trial as an energy study's documents default it
    parser.add_argument("--hot-window-s", type=float, default=ENERGY_HOT_WINDOW_S, help="the trial's hot window")
    parser.add_argument("--warmup-s", type=float, default=ENERGY_WARMUP_S, help="the trial's warm-up")
    parser.add_argument("--gap-s", type=float, default=1.0, help="idle before each trial and reference")
    parser.add_argument("--trial-warmups", type=lambda text: [float(x) for x in text.split(",")], default=None,
                        help="comma-separated warm-ups (s) of the trial measurement, each measured every round "
                             "and compared with the same reference (default: --warmup-s)")
    parser.add_argument("--cache", default="/tmp/paretune-energy-reference-cache")
    parser.add_argument("--out", default=None, help="raw JSON (written after every row)")
    parser.add_argument("--local", action="store_true", help="a simulated GPU instead of the real one")
    parser.add_argument("--seed", type=int, default=13, help="--local: tick phases, lags and warm-ups")
    parser.add_argument("--analyse", default=None, help="print the tables of a recorded JSON and stop")
    args = parser.parse_args(argv)
    if args.analyse:
        recorded: dict[str, Any] = json.loads(Path(args.analyse).read_text())
        print(HEADER)
        for row in recorded["rows"]:
            print_row(row)
        print_summary(summarize(recorded["rows"]))
        return recorded
    kernels = load_kernels(args)
    report: dict[str, Any] = {
        "mode": "local" if args.local else "gpu",
        "kernels": kernels,
        "settings": {k: getattr(args, k) for k in ("rounds", "reference_s", "hot_window_s", "gap_s")},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": [],
    }
    bench: Any = SimulatedBench(kernels, args) if args.local else GpuBench(kernels, args)
    names = list(kernels)
    if args.local:
        report["truth"] = {name: bench.truth(name) for name in kernels}
    else:
        report["skipped"] = bench.failed
        names = [name for name in names if name not in bench.failed]
    print(HEADER, flush=True)
    run_rounds(bench, names, args, report)
    report["summary"] = summarize(report["rows"])
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print_summary(report["summary"])
    return report


if __name__ == "__main__":
    main()
