"""How fast this machine runs fixed Python work, sampled every few seconds: the reference a
soak runs beside it, so that a host whose speed drifts is told apart from a service that
slows down.

    .venv/bin/python bench/host_speed.py --minutes 60 --out host.json

Each sample times three fixed pieces of work in CPU time, the best of three (waiting for a
core is not counted; a core that runs the work slower is):
- `loop_ms`: an integer loop that stays in the core's caches;
- `lookups_ms`: 50,000 lookups in random order over a 2,000,000-entry dict, which miss them;
- `request_ms`: 100 times what a control plane does in Python for a result: the body parsed
  by its wire model, an ORM query of the service's trials built and run (on an in-memory
  SQLite), the acknowledgement serialized.

A sample costs about 2% of a core at the default interval. Per minute: the median of each;
and, as bench/soak.py compares its own, the last 10 minutes' mean against minutes 5-15's.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from service.store.models import Base, Trial  # noqa: E402
from wire.contract import ResultAck, TrialResult  # noqa: E402

WORK = ("loop_ms", "lookups_ms", "request_ms")
BODY = json.dumps({"status": "completed", "next_lease": True,
                   "metrics": {"runtime_ms": {"value": 1.25}, "energy_j": {"value": 0.5}}}).encode()


class Reference:
    def __init__(self) -> None:
        rng = random.Random(1)
        self.table = {i: i for i in range(2_000_000)}
        self.order = rng.sample(range(2_000_000), 50_000)
        self.engine = create_engine("sqlite://")
        Base.metadata.create_all(self.engine)
        self.session = Session(self.engine)

    def loop(self) -> None:
        total = 0
        for i in range(300_000):
            total += i

    def lookups(self) -> None:
        table, total = self.table, 0
        for key in self.order:
            total += table[key]

    def request(self) -> None:
        for n in range(100):
            report = TrialResult.model_validate_json(BODY)
            self.session.execute(select(Trial).where(Trial.study_id == n, Trial.state == "queued")
                                 .order_by(Trial.id).limit(1)).scalars().first()
            ResultAck(trial_id=n, state="completed").model_dump_json()
            assert report.metrics
        self.session.rollback()

    def sample(self) -> dict[str, float]:
        return {"loop_ms": best_cpu_ms(self.loop), "lookups_ms": best_cpu_ms(self.lookups),
                "request_ms": best_cpu_ms(self.request)}


def best_cpu_ms(work: Callable[[], None], times: int = 3) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return round(best * 1000, 2)


def per_minute(samples: list[dict[str, float]]) -> list[dict[str, Any]]:
    minutes: dict[int, list[dict[str, float]]] = {}
    for s in samples:
        minutes.setdefault(int(s["t"] // 60) + 1, []).append(s)
    return [{"minute": m, **{k: round(statistics.median(s[k] for s in rows), 2) for k in WORK}}
            for m, rows in sorted(minutes.items())]


def windows(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """The mean of `key` over minutes 5-15 and over the last 10 minutes (NaN where no row has
    it): the windows bench/soak.py's flatness compares."""
    last = rows[-1]["minute"]

    def mean(lo: int, hi: int) -> float:
        values = [r[key] for r in rows if lo <= r["minute"] <= hi and r.get(key) is not None]
        return statistics.fmean(values) if values else math.nan

    return mean(5, 15), mean(last - 9, last)


def drift(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each piece of work's last 10 minutes against minutes 5-15, as the soak compares its own."""
    out = {}
    for key in WORK:
        early, late = windows(rows, key)
        if not (math.isnan(early) or math.isnan(late)):
            out[key] = {"minutes_5_15": round(early, 2), "last_10": round(late, 2), "ratio": round(late / early, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True, help="per-minute rows and the drift, as JSON")
    parser.add_argument("--samples", type=Path, help="each sample as a JSON line, as it is taken")
    args = parser.parse_args()
    if args.interval_s <= 0 or args.minutes <= 0:
        parser.error("--minutes and --interval-s must be positive")
    reference = Reference()
    reference.sample()  # warm: imports, the statement cache
    samples: list[dict[str, float]] = []
    sink = args.samples.open("a") if args.samples else None
    started = time.monotonic()
    try:
        while (now := time.monotonic() - started) < args.minutes * 60:
            samples.append({"t": round(now, 1), **reference.sample()})
            if sink:
                print(json.dumps(samples[-1]), file=sink, flush=True)
            time.sleep(max(0.0, started + len(samples) * args.interval_s - time.monotonic()))
    except KeyboardInterrupt:  # stopped early (Ctrl-C): what was sampled is kept
        pass
    finally:
        if sink:
            sink.close()
    rows = per_minute(samples)
    summary = {"command": "bench/host_speed.py " + " ".join(sys.argv[1:]), "interval_s": args.interval_s,
               "samples": len(samples), "drift": drift(rows) if rows else {}, "minutes": rows}
    args.out.write_text(json.dumps(summary, indent=2))
    print(" ".join(f"{k:>11}" for k in ("minute", *WORK)))
    for r in rows:
        print(" ".join(f"{r[k]!s:>11}" for k in ("minute", *WORK)))
    print(json.dumps(summary["drift"]))


if __name__ == "__main__":
    main()
