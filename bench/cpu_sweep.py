"""Exhaustive sweeps of the cpu backend's built-in kernels over a small space, on several
workload shapes each: the recorded data that leave-one-shape-out replays of transfer read
(bench/replay_transfer.py, tests/service/test_transfer_replay.py).

Each configuration of the kernel's sweep space (SPACES: a few values of its tiles and flags,
every one a point of the built-in's own space) is compiled once with the worker's cpu backend,
checked once against the numpy reference, then measured on every shape (the same harness a
worker runs, in this process, with short windows: MEASURE) in `--passes` passes, each in its
own shuffled order, so that the phases of a shared virtual machine neither line up with a
parameter nor decide a row. A row's values are the minimum of its passes (`row_values`), and
the spread between passes is the replay's noise.

Why the minimum: what a shared machine adds to a time is a delay, almost never a saving. In
the aligned sweeps of 2026-12-06 (cpu_sweep_{matmul,stencil}_aligned.json), outside the
matmul's n = 32, 72 of 3,060 passes ran more than 5% slower than their row's median and 1
ran more than 5% faster. At n = 32 a kernel of 2.8 us ran either at its speed or about 1.27
times slower, so a row with two of its three passes in the slow mode had that as its median:
the eight configurations whose tiles all cover the whole 32 x 32 matrix, and so run the same
iterations, ranked anywhere from 1st to 38th. The minimum of the passes is the estimate of a
time that such delays do not move.

    python bench/cpu_sweep.py --kernel matmul --out SWEEP.json
    python bench/cpu_sweep.py --kernel stencil --limit 6 --out /tmp/s.json   # a few configurations
    python bench/cpu_sweep.py --revalue OLD.json --out NEW.json   # a recorded sweep's values again

A study over the same space names it in its document (`space_document(kernel)`), so that
the studies' configurations are the sweep's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wire.contract import KernelSpec, MeasureSettings, WorkloadShape  # noqa: E402
from wire.failures import TrialFailure  # noqa: E402
from wire.kernels import get_builtin  # noqa: E402
from workers.backends.cpu import CpuBackend  # noqa: E402
from workers.fingerprint import cpu_model  # noqa: E402

OBJECTIVES = ["runtime_ms", "latency_ms"]
MEASURE = MeasureSettings(warmup_s=0.02, min_repeats=8, max_repeats=400, target_s=0.04, cold_samples=8)
# kernel -> parameter -> the values swept
SPACES: dict[str, dict[str, list[Any]]] = {
    "matmul": {"TILE_M": [4, 8, 16, 32, 64], "TILE_N": [16, 64, 256], "TILE_K": [16, 64, 256],
               "opt": ["-O2", "-O3"], "march_native": [False, True]},
    "stencil": {"TILE_I": [4, 8, 16, 32, 64], "TILE_J": [32, 64, 128, 256, 512, 1024],
                "opt": ["-O2", "-O3"], "march_native": [False, True]},
}
SHAPES: dict[str, list[dict[str, int]]] = {
    "matmul": [{"n": 32}, {"n": 64}, {"n": 96}, {"n": 160}],
    "stencil": [{"n": 96, "m": 96, "steps": 2}, {"n": 192, "m": 192, "steps": 2},
                {"n": 384, "m": 384, "steps": 2}, {"n": 768, "m": 768, "steps": 2}],
}


def space_document(kernel: str) -> list[dict[str, Any]]:
    """The sweep space as a study document's `space`, each parameter's default the built-in's."""
    builtin = get_builtin("cpu", kernel)
    assert builtin is not None
    return [{"name": name, "type": "categorical", "choices": values, "default": builtin.default_config[name]}
            for name, values in SPACES[kernel].items()]


def points(kernel: str) -> list[dict[str, Any]]:
    """Every configuration of the sweep space (a study over it gives the compiler no other
    flag: the built-in's unroll, vectorize and inline limit are the compiler's defaults)."""
    names = list(SPACES[kernel])
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*SPACES[kernel].values())]


class Sweeper:
    def __init__(self, kernel: str, shapes: list[dict[str, int]]) -> None:
        self.backend = CpuBackend()
        self.specs = [KernelSpec(backend="cpu", builtin=kernel, workload=[WorkloadShape(dims=dims)])
                      for dims in shapes]
        self.work = Path(tempfile.mkdtemp(prefix="paretune-cpu-sweep-"))

    def build(self, config: dict[str, Any]) -> tuple[Any, str | None]:
        """The configuration compiled and checked, or why it cannot be measured."""
        try:
            built = self.backend.compile(self.specs[0], config, Path(tempfile.mkdtemp(dir=self.work)))
            outcome = self.backend.check(self.specs[0], config, built)
        except TrialFailure as failure:
            return None, f"{failure.reason.value}: {failure.message[:300]}"
        return (built, None) if outcome.passed else (None, f"wrong result: {outcome.details.get('rel_err')}")

    def measure(self, config: dict[str, Any], built: Any) -> list[dict[str, float]]:
        """One measurement per shape, as a worker takes it."""
        values = []
        for spec in self.specs:
            metrics, _ = self.backend.measure(spec, config, built, OBJECTIVES, MEASURE)
            values.append({name: metric.value for name, metric in metrics.items()})
        return values


def sweep(kernel: str, shapes: list[dict[str, int]], limit: int | None, seed: int, passes: int) -> dict[str, Any]:
    """Every configuration built once, then measured `passes` times on every shape, each
    pass in its own shuffled order."""
    order = points(kernel)
    random.Random(seed).shuffle(order)
    if limit is not None:
        order = order[:limit]
    sweeper = Sweeper(kernel, shapes)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    built: dict[int, Any] = {}
    for index, config in enumerate(order):
        done, message = sweeper.build(config)
        rows.append({"config": config, **({"message": message} if message else {"passes": []})})
        if done is not None:
            built[index] = done
    for number in range(passes):
        indices = list(built)
        random.Random(seed * 1000 + number).shuffle(indices)
        for index in indices:
            rows[index]["passes"].append(sweeper.measure(rows[index]["config"], built[index]))
        print(f"pass {number + 1}/{passes}: {time.monotonic() - started:.0f} s", flush=True)
    shutil.rmtree(sweeper.work, ignore_errors=True)
    for row in rows:
        if "passes" in row:
            row["values"] = row_values(row["passes"])
    return {"rows": rows, "noise": noise(rows, len(shapes), passes), "passes": passes,
            "seconds": round(time.monotonic() - started, 1)}


def row_values(passes: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per shape, each objective's minimum over a row's passes (the module's docstring says why)."""
    return [{name: min(p[shape][name] for p in passes) for name in passes[0][shape]} for shape in range(len(passes[0]))]


def revalue(record: dict[str, Any], command: str) -> dict[str, Any]:
    """A recorded sweep with its rows' values taken from their passes again (`row_values`);
    what it was measured with stays, and `revalued` says by what command."""
    rows = [{**row, "values": row_values(row["passes"])} if row.get("passes") else row for row in record["rows"]]
    return {**record, "rows": rows, "revalued": command}


def noise(rows: list[dict[str, Any]], n_shapes: int, passes: int) -> list[dict[str, float]]:
    """Per shape and objective, the relative standard deviation of one measurement: the
    median over configurations of the range of their passes (max/min - 1) divided by the
    expected range of `passes` normal draws."""
    expected_range = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326}[passes]
    out = []
    for shape in range(n_shapes):
        spreads = {name: statistics.median(max(p[shape][name] for p in row["passes"])
                                           / min(p[shape][name] for p in row["passes"]) - 1
                                           for row in rows if row.get("passes"))
                   for name in OBJECTIVES}
        out.append({f"{name}_sigma": spread / expected_range for name, spread in spreads.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", choices=sorted(SPACES))
    parser.add_argument("--revalue", help="a recorded sweep file: write it to --out with its values taken again")
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=None, help="only this many configurations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=3, choices=(2, 3, 4, 5))
    args = parser.parse_args()
    command = shlex.join(["python", "bench/cpu_sweep.py", *sys.argv[1:]])
    if args.revalue:
        record = revalue(json.loads(Path(args.revalue).read_text()), command)
    elif args.kernel is None:
        parser.error("--kernel or --revalue is needed")
    else:
        shapes = SHAPES[args.kernel]
        result = sweep(args.kernel, shapes, args.limit, args.seed, args.passes)
        record = {
            "kernel": args.kernel, "backend": "cpu", "objectives": OBJECTIVES, "space": space_document(args.kernel),
            "shapes": shapes, "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpu": cpu_model(), "platform": platform.platform(), "cc": CpuBackend().compiler_version},
            "command": command, "measure": MEASURE.model_dump(), **result,
        }
    Path(args.out).write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(table(record))


def table(record: dict[str, Any]) -> str:
    """Per shape: configurations measured, the best runtime and its configuration, and the
    noise of one measurement."""
    done = [r for r in record["rows"] if r.get("values")]
    lines = [f"{record['kernel']}: {len(record['rows'])} configurations ({len(done)} measured), "
             f"{record['passes']} passes, {record['seconds']} s, {record['date']}",
             "| shape | best runtime_ms | best configuration | configurations within 2% | runtime sigma "
             "| latency sigma |", "| --- | --- | --- | --- | --- | --- |"]
    for index, dims in enumerate(record["shapes"]):
        best = min(done, key=lambda r: r["values"][index]["runtime_ms"])
        fastest = best["values"][index]["runtime_ms"]
        near = sum(r["values"][index]["runtime_ms"] <= 1.02 * fastest for r in done)
        sigma = record["noise"][index]
        lines.append(f"| {json.dumps(dims)} | {fastest:.4f} | `{json.dumps(best['config'])}` | {near} | "
                     f"{sigma['runtime_ms_sigma']:.3f} | {sigma['latency_ms_sigma']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
