"""A study's front as its scheduling step keeps it, with two objectives, as it grows to
thousands of members: the cost of accounting for each result (`fronts.Front.offer` and the
front's hypervolume) per thousand results, against recomputing the hypervolume over the
front's members for every result that changes the front (the way before `Hypervolume2D`),
in the same run.

The results are those of bench/fleet.py's workload once NSGA-II has settled: a ZDT1-like
front where most new points land on the front (y = 1), with some dominated ones.

    .venv/bin/python bench/fronts.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from service.domain import pareto  # noqa: E402
from service.scheduling.fronts import Front  # noqa: E402
from service.studies.document import ResolvedObjective  # noqa: E402


def results(n: int, seed: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for x, y in zip(rng.random(n), rng.choice([1, 1, 1, 2, 5], size=n), strict=True):
        g = 1.0 + 9.0 * (y - 1) / 9.0
        out.append({"f1": float(x), "f2": g * (1.0 - math.sqrt(x / g))})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    objectives = [ResolvedObjective(name=name, direction="minimize") for name in ("f1", "f2")]
    reference, baseline = [2.0, 2.0], {"f1": 0.5, "f2": 0.5}
    rows = []
    running, recomputed = Front(objectives, reference, {}, baseline), Front(objectives, reference, {}, baseline)
    everything = results(args.trials, args.seed)
    volume = again = 0.0
    for start in range(0, args.trials, 1000):
        chunk = everything[start:start + 1000]
        began = time.perf_counter()
        for key, values in enumerate(chunk, start):
            if running.offer(key, values, baseline)[0]:
                volume = running.hypervolume()
        running_s = time.perf_counter() - began
        began = time.perf_counter()
        for key, values in enumerate(chunk, start):
            if recomputed.offer(key, values, baseline)[0]:
                members = recomputed.members.extra
                again = pareto.hypervolume(members[np.all(np.isfinite(members), axis=1)], reference)
        recomputed_s = time.perf_counter() - began
        assert math.isclose(volume, again, rel_tol=1e-9), (volume, again)
        rows.append((f"{start}-{start + len(chunk)}", len(running), 1000 * running_s, 1000 * recomputed_s))
    print("results | front size after | running hypervolume (ms per 1,000) | recomputed (ms per 1,000) | ratio")
    print("--- | --- | --- | --- | ---")
    for span, size, fast, slow in rows:
        print(f"{span} | {size} | {fast:.1f} | {slow:.1f} | {slow / fast:.1f}x")


if __name__ == "__main__":
    main()
