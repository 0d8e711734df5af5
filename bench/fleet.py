"""Fleet benchmark: does the per-trial cost of lease, result and ask/tell stay flat as a
study grows to 100k trials?

`paretune serve` runs on Postgres; W worker threads speak the real HTTP protocol. The study
is grown in steps by bulk-inserting completed trials (as many finished trials as a long
study would have), then each step times real lease -> result cycles, trial pages at the
start and deep into the study, and the front. The random sampler is used so that the
numbers are the service's own cost, not a sampler's model fitting.

    .venv/bin/python bench/fleet.py [--sizes 0,10000,50000,100000] [--cycles 300] [--workers 8]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import func, select, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_worker import register, result_for  # noqa: E402
from helpers import create_postgres_database, drop_postgres_database, start_service  # noqa: E402

from service.domain.pareto import non_dominated_mask  # noqa: E402
from service.store.db import Database, next_seq  # noqa: E402
from service.store.models import Study, Trial  # noqa: E402


def seed(db: Database, study_id: int, count: int) -> None:
    """Append `count` completed trials to the study, as the service would have stored them."""
    if count <= 0:
        return
    rng = random.Random(count)
    with db.write() as session:
        study = session.get(Study, study_id)
        assert study is not None
        start = study.n_created
        rows = []
        for i in range(count):
            x, y = rng.random(), rng.randint(1, 10)
            values = result_for({"config": {"x": x, "y": y}})["metrics"]
            rows.append({
                "study_id": study_id, "number": start + i, "state": "completed", "seq": next_seq(session),
                "pool": study.pool, "backend": study.backend, "config": {"x": x, "y": y}, "sampler_state": {},
                "attempt": 1, "values": {"f1": values["f1"]["value"], "f2": values["f2"]["value"]},
                "feasible": True, "on_front": False, "completed_index": study.n_completed + i + 1,
            })
        for batch in range(0, len(rows), 5000):
            session.execute(Trial.__table__.insert(), rows[batch:batch + 5000])
        study.n_created += count
        study.n_completed += count
        study.max_trials = study.n_created + 100_000
        # keep the front flags right: recompute over all completed trials
        ids_values = session.execute(
            select(Trial.id, Trial.values).where(Trial.study_id == study_id, Trial.state == "completed")
        ).all()
        points = np.array([[v["f1"], v["f2"]] for _, v in ids_values])
        mask = non_dominated_mask(points)
        front_ids = [row[0] for row, keep in zip(ids_values, mask, strict=True) if keep]
        session.execute(update(Trial).where(Trial.study_id == study_id).values(on_front=False))
        session.execute(update(Trial).where(Trial.id.in_(front_ids)).values(on_front=True))
        study.front_size = len(front_ids)


def cycles(url: str, token: str, total: int, workers: int) -> tuple[list[float], list[float]]:
    lease_times: list[float] = []
    result_times: list[float] = []
    lock = threading.Lock()
    remaining = [total]

    def run() -> None:
        with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
            worker_id = register(client)
            while True:
                with lock:
                    if remaining[0] <= 0:
                        return
                    remaining[0] -= 1
                t0 = time.perf_counter()
                r = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 10})
                t1 = time.perf_counter()
                if r.status_code != 200:
                    continue
                held = r.json()
                r2 = client.post(f"/v1/leases/{held['token']}/result", json=result_for(held["trial"]))
                t2 = time.perf_counter()
                r2.raise_for_status()
                with lock:
                    lease_times.append(t1 - t0)
                    result_times.append(t2 - t1)

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lease_times, result_times


def timed_get(client: httpx.Client, path: str, repeats: int = 5, **params: object) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        client.get(path, params=params).raise_for_status()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0,10000,50000,100000")
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    db_url = create_postgres_database()
    workdir = Path(tempfile.mkdtemp())
    service = start_service(db_url, workdir)
    db = Database(db_url)
    rows = []
    try:
        admin = service.client()
        doc = {
            "name": "fleet", "kernel": {"backend": "python", "source": "bench:fleet"},
            "space": [{"name": "x", "type": "float", "low": 0, "high": 1, "default": 0.5},
                      {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}],
            "objectives": ["f1", "f2"], "sampler": {"name": "random", "seed": 1},
            "budget": {"max_trials": 1_000_000}, "parallelism": args.workers * 2,
        }
        study = admin.post("/v1/studies", json=doc).json()
        token = service.make_worker_token()
        cycles(service.url, token, args.workers * 4, args.workers)  # warm-up
        for size in sizes:
            with db.read() as session:
                have = session.execute(select(func.count()).where(Trial.study_id == study["id"])).scalar_one()
            seed(db, study["id"], size - have)
            t0 = time.perf_counter()
            cycles(service.url, token, 1, 1)  # the first result after growth syncs the sampler mirror
            catch_up = time.perf_counter() - t0
            leases, results = cycles(service.url, token, args.cycles, args.workers)
            first_page = timed_get(admin, f"/v1/studies/{study['id']}/trials", limit=100)
            page = admin.get(f"/v1/studies/{study['id']}/trials", params={"limit": 100, "sort": "-number"}).json()
            deep_page = timed_get(admin, f"/v1/studies/{study['id']}/trials", limit=100, cursor=page["next_cursor"],
                                  sort="-number")
            sorted_page = timed_get(admin, f"/v1/studies/{study['id']}/trials", limit=100, sort="f1")
            front = timed_get(admin, f"/v1/studies/{study['id']}/front")
            rows.append((max(size, have), catch_up, statistics.median(leases), np.percentile(leases, 95),
                         statistics.median(results), np.percentile(results, 95), first_page, deep_page,
                         sorted_page, front))
    finally:
        service.stop()
        db.dispose()
        drop_postgres_database(db_url)

    base = rows[0]
    print(f"\nfleet benchmark: {args.workers} workers, {args.cycles} lease->result cycles per size, Postgres")
    header = ("trials", "catch-up s", "lease p50 ms", "lease p95 ms", "result p50 ms", "result p95 ms",
              "page ms", "deep page ms", "sorted page ms", "front ms", "result p50 vs first")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        size, catch_up, l50, l95, r50, r95, page, deep, sorted_page, front = row
        print(f"{size} | {catch_up:.2f} | {l50 * 1e3:.1f} | {l95 * 1e3:.1f} | {r50 * 1e3:.1f} | {r95 * 1e3:.1f} | "
              f"{page * 1e3:.1f} | {deep * 1e3:.1f} | {sorted_page * 1e3:.1f} | {front * 1e3:.1f} | "
              f"{r50 / base[4]:.2f}x")


if __name__ == "__main__":
    main()
