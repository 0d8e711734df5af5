"""What a sandbox costs a trial: the wall time of one cpu trial in fresh sandbox processes
(the cpu backend's default), at each isolation level this host allows, over N trials.
Two cases: `miss` compiles and runs (two sandbox processes), `hit` finds the build in the
artifact cache and only runs (one sandbox process plus the verified copy of the build).
Medians and quartiles in ms; the kernel itself takes well under a millisecond. The levels
take turns trial by trial, so that a change in the machine's load falls on all of them.

    python bench/isolation_overhead.py [--trials 15]
    PYTHONPATH=OTHER_CHECKOUT python bench/isolation_overhead.py   # a tree without trial isolation:
                                                                   # its one level, as `original`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wire.contract import KernelSpec, MeasureSettings, TrialSpec, WorkloadShape
from wire.kernels import get_builtin
from workers.cache import ArtifactCache
from workers.sandbox.context import Context
from workers.sandbox.stages import execute_trial

MEASURE = MeasureSettings(warmup_s=0.001, min_repeats=3, max_repeats=5, target_s=0.005)
MATMUL = get_builtin("cpu", "matmul").read_source()  # type: ignore[union-attr]


def spec(number: int, unique: bool) -> TrialSpec:
    # a comment makes the source, hence the cache key, unique: a miss
    source = MATMUL + (f"/* {number} {time.time_ns()} */\n" if unique else "")
    kernel = KernelSpec(backend="cpu", source=source, entry="matmul", workload=[WorkloadShape(dims={"n": 16})],
                        options={"problem": "matmul"})
    return TrialSpec(trial_id=number, study_id=1, number=number, attempt=1, is_baseline=False, kernel=kernel,
                     config={"opt": "-O1"}, objectives=["runtime_ms"], compile_timeout_s=60, run_timeout_s=60,
                     measure=MEASURE)


def sandboxes() -> dict[str, Any]:
    """Each level this host allows, by name; {"original": None} for a tree without them."""
    try:
        from workers.sandbox.isolation import IsolationUnavailable, choose
        from workers.sandbox.sandbox import Sandbox
    except ImportError:
        return {"original": None}
    found: dict[str, Any] = {}
    for level in ("none", "user", "namespaces"):
        sandbox = Sandbox()
        try:
            sandbox.isolation = choose(level, work_root=sandbox.root, hidden=[])
            found[level] = sandbox
        except IsolationUnavailable as exc:
            print(f"{level}: not available here ({exc})", file=sys.stderr)
            sandbox.close()
    return found


def measure(levels: dict[str, Any], trials: int) -> dict[str, dict[str, list[float]]]:
    caches = {name: ArtifactCache(Path(tempfile.mkdtemp(prefix="overhead-"))) for name in levels}
    walls: dict[str, dict[str, list[float]]] = {name: {"miss": [], "hit": []} for name in levels}
    contexts = {name: Context(caches[name], sandbox) if sandbox is not None else Context(caches[name])
                for name, sandbox in levels.items()}
    for name in levels:
        execute_trial(spec(0, unique=False), contexts[name])  # the hit case's build
    for number in range(1, trials + 1):
        for name in levels:
            for case in ("miss", "hit"):
                started = time.perf_counter()
                result = execute_trial(spec(number, unique=case == "miss"), contexts[name])
                walls[name][case].append((time.perf_counter() - started) * 1e3)
                assert result is not None and result.status == "completed", result and result.message
    return walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=15)
    args = parser.parse_args()
    levels = sandboxes()
    try:
        walls = measure(levels, args.trials)
    finally:
        for sandbox in levels.values():
            if sandbox is not None:
                sandbox.close()
    print(f"{'level':11} {'case':5} {'median ms':>10} {'q1':>8} {'q3':>8}  (n={args.trials})")
    for name, cases in walls.items():
        for case, values in cases.items():
            q1, median, q3 = statistics.quantiles(values, n=4)
            print(f"{name:11} {case:5} {median:10.0f} {q1:8.0f} {q3:8.0f}")


if __name__ == "__main__":
    main()
