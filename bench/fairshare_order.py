"""The fair-share plan a lease makes (`ShareView.plan`: the pool's studies with queued trials in
the policy's order, the first few of them), timed alone against the number of studies in the
pool: four teams of different weights, studies of mixed priority classes and weights, random
usage. Prints a table of the median time per plan.

    python bench/fairshare_order.py [--studies 1,100,400,1000] [--plans 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.trials.fairshare import Candidate, Priority, TeamShare, Usage  # noqa: E402
from service.trials.shares import Entry, PoolShares, ShareView  # noqa: E402
from service.workers.registry import WorkerInfo  # noqa: E402


def pool(studies: int, teams: int = 4, seed: int = 1) -> PoolShares:
    rng = random.Random(seed)
    shares = PoolShares("gpu")
    for team in range(teams):
        shares.shares[team] = TeamShare(weight=1.0 + team)
        shares.teams[team] = Usage(decayed_s=rng.random() * 1000, running=rng.randrange(10))
        shares.team_names[team] = f"team-{team}"
    for study in range(studies):
        candidate = Candidate(study, study % teams, rng.choice(list(Priority)), rng.choice([1.0, 2.0]))
        shares.entries[study] = Entry(candidate, "triton", False, True, rng.randrange(0, 30))
        shares.studies[study] = Usage(decayed_s=rng.random() * 100, running=rng.randrange(5))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", default="1,100,400,1000")
    parser.add_argument("--plans", type=int, default=200)
    args = parser.parse_args()
    worker = WorkerInfo(1, 1, "gpu", ("triton", "cuda"), True, {"gpu": True})
    print("| studies in the pool | median ms per plan |")
    print("| --- | --- |")
    for count in map(int, args.studies.split(",")):
        view = ShareView()
        view.pools = {"gpu": pool(count)}
        times = []
        for _ in range(args.plans):
            started = time.perf_counter()
            view.plan(worker)
            times.append(time.perf_counter() - started)
        print(f"| {count} | {statistics.median(times) * 1000:.3f} |")


if __name__ == "__main__":
    main()
