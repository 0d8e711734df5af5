"""Lease cost against the size of the queue: whether the fair-share lease stays flat as the
queued trials and the studies of a pool grow.

    .venv/bin/python bench/lease_scale.py [--cycles 400] [--shapes 1x100,1x1000,10x100,100x100,400x25]

For each shape STUDIESxPARALLELISM, on a fresh Postgres database: that many studies of four
teams, each keeping `parallelism` trials in flight (so studies x parallelism are queued),
then one worker leases and reports trials in a row (`queued`: the trials queued when it
starts, studies x parallelism or what the studies queued once none queues more), each result
asking for the next lease (the agent's way). A first pass of one cycle per study (fair share
takes them in turn) is reported apart: a study's first lease and result in a process read what
the process then keeps of it (its document, front and baseline). Then `--cycles` more are
measured. Reported: the median and p99 of that request (report + lease) in both, the
server's CPU per trial over the measured cycles (its scheduler process's included, and shown
apart), and the scheduling steps the server ran in
them (per trial, and the mean time each held its study's lock, from its /metrics); then, the
service stopped, the median time of the fair-share view's read of the pools on what the shape
left (each replica reads it every 0.5 s, less often where a read takes longer than 2.5 ms,
service.trials.shares). Flat: p99
at the largest queue within noise of the smallest.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the service of this tree (a worktree of another commit runs its own)
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from fleet import _stop_on_sigterm, children_cpu_seconds, machine, server_cpu_seconds, study_document  # noqa: E402
from fleet_clients import objective  # noqa: E402
from helpers import create_postgres_database, drop_postgres_database, start_service  # noqa: E402

from service.store.db import Database  # noqa: E402
from service.trials.shares import ShareView  # noqa: E402

TEAMS = ("t1", "t2", "t3", "t4")


def run(studies: int, parallelism: int, cycles: int, profile: Path | None = None,
        serve_args: tuple[str, ...] = ()) -> dict[str, Any]:
    db_url = create_postgres_database()
    try:
        row = run_cycles(db_url, studies, parallelism, cycles, profile, serve_args)
        return {**row, "view_read_ms": view_read_ms(db_url)}
    finally:
        drop_postgres_database(db_url)


def run_cycles(db_url: str, studies: int, parallelism: int, cycles: int, profile: Path | None,
               serve_args: tuple[str, ...]) -> dict[str, Any]:
    service = start_service(db_url, Path(tempfile.mkdtemp(prefix="lease-scale-")), serve_args=serve_args)
    try:
        admin = service.client()
        clients = {t: service.client(service.make_user_token("admin", t)) for t in TEAMS}
        for i in range(studies):
            doc = study_document(f"s{i}", 100_000, parallelism, seed=i)
            clients[TEAMS[i % len(TEAMS)]].post("/v1/studies", json=doc).raise_for_status()
        # the worker registers first: studies queue their trials once a worker can run them
        worker = service.client(service.make_worker_token())
        worker_id = worker.post("/v1/workers/register", json={
            "name": "bench", "pool": "default", "fingerprint": {"backends": ["python"]}}).json()["worker_id"]
        target = studies * parallelism
        deadline = time.monotonic() + 300
        queued, steady = 0, 0
        engine = create_engine(db_url)  # until every study queued its parallelism, or none queues more for 5 s
        while time.monotonic() < deadline and queued < target and steady < 10:
            time.sleep(0.5)
            with engine.connect() as connection:
                now = int(connection.execute(text("SELECT count(*) FROM trials WHERE state = 'queued'")).scalar_one())
            steady = steady + 1 if now == queued else 0
            queued = now
        engine.dispose()
        held = worker.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 5}).json()

        def cycle() -> float:
            """Report the held trial and take the next lease with it; the request's milliseconds."""
            nonlocal held
            values = objective(held["trial"]["config"])
            body = {"status": "completed", "metrics": {k: {"value": v} for k, v in values.items()}, "next_lease": True}
            t0 = time.perf_counter()
            ack = worker.post(f"/v1/leases/{held['token']}/result", json=body)
            elapsed = (time.perf_counter() - t0) * 1e3
            ack.raise_for_status()
            held = ack.json()["next_lease"]
            if held is None:
                held = worker.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 5}).json()
            return elapsed

        # the first pass: fair share takes each study in turn, and each study's first lease and
        # result in a process read what the process keeps of it (its document, front, baseline)
        first_pass = [cycle() for _ in range(studies)]
        steps_before = step_totals(admin)
        cpu_before = server_cpu_seconds(service.process.pid)
        scheduler_before = children_cpu_seconds(service.process.pid)
        spy = None if profile is None else subprocess.Popen(
            ["py-spy", "record", "--pid", str(service.process.pid), "--rate", "200", "--format", "raw",
             "--output", str(profile / f"lease_scale_{studies}x{parallelism}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        latencies = [cycle() for _ in range(cycles)]
        cpu = server_cpu_seconds(service.process.pid) - cpu_before
        scheduler_cpu = children_cpu_seconds(service.process.pid) - scheduler_before
        steps = [after - before for after, before in zip(step_totals(admin), steps_before, strict=True)]
        if spy is not None:  # py-spy writes its profile when interrupted
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        for c in (admin, worker, *clients.values()):
            c.close()
    finally:
        service.stop()
    return {"studies": studies, "parallelism": parallelism, "queued": queued, "cycles": cycles,
            "first_pass_p50_ms": round(float(np.percentile(first_pass, 50)), 2),
            "first_pass_p99_ms": round(float(np.percentile(first_pass, 99)), 2),
            "p50_ms": round(float(np.percentile(latencies, 50)), 2),
            "p99_ms": round(float(np.percentile(latencies, 99)), 2),
            "server_cpu_ms_per_trial": round(1000 * cpu / cycles, 2),
            "scheduler_cpu_ms_per_trial": round(1000 * scheduler_cpu / cycles, 2),  # of it: a scheduler process's
            # the server's own steps (none counted where a scheduler process steps the studies)
            "steps_per_trial": round(steps[0] / cycles, 3),
            "step_mean_ms": round(1000 * steps[1] / max(1.0, steps[0]), 2)}


def view_read_ms(db_url: str, reads: int = 30) -> float:
    """The median time of the fair-share view's read of the pools (`ShareView.read`, what each
    replica does every REFRESH_S or more) on the database the shape left, the service stopped."""
    db = Database(db_url, pool_size=1)
    view, times = ShareView(db), []
    try:
        for _ in range(reads):
            started = time.perf_counter()
            view.read()
            times.append(time.perf_counter() - started)
    finally:
        db.dispose()
    return round(1000 * float(np.median(times)), 2)


def step_totals(client: Any) -> tuple[float, float]:
    """(steps, seconds their studies' locks were held) so far, from the server's /metrics."""
    samples = {sample.name: sample.value for family in text_string_to_metric_families(client.get("/metrics").text)
               for sample in family.samples}
    return samples.get("paretune_step_seconds_count", 0.0), samples.get("paretune_step_seconds_sum", 0.0)


def main() -> None:
    _stop_on_sigterm()  # a timeout or kill stops the service it started
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--shapes", default="1x100,1x1000,10x100,100x100,400x25")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scheduler-process", action=argparse.BooleanOptionalAction, default=True,
                        help="the server steps its studies in a scheduler process of its own (serve's default on "
                        "Postgres; its CPU is counted too) or in the server process")
    parser.add_argument("--profile", type=Path, help="a folder: py-spy records the server over the cycles of each "
                        "shape there (collapsed stacks, lease_scale_SxP.txt)")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        studies, parallelism = (int(x) for x in shape.split("x"))
        rows.append(run(studies, parallelism, args.cycles, args.profile,
                        ("--scheduler-process" if args.scheduler_process else "--no-scheduler-process",)))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'studies':>8} {'parallelism':>12} {'queued':>8} {'first pass p50/p99':>19} {'p50 ms':>8} {'p99 ms':>8}"
          f" {'server ms/trial':>16} {'of it scheduler':>16} {'steps/trial':>12} {'step ms':>8} {'view read ms':>13}")
    for r in rows:
        first = f"{r['first_pass_p50_ms']}/{r['first_pass_p99_ms']}"
        print(f"{r['studies']:>8} {r['parallelism']:>12} {r['queued']:>8} {first:>19} {r['p50_ms']:>8} "
              f"{r['p99_ms']:>8} {r['server_cpu_ms_per_trial']:>16} {r['scheduler_cpu_ms_per_trial']:>16} "
              f"{r['steps_per_trial']:>12} {r['step_mean_ms']:>8} {r['view_read_ms']:>13}")
    if args.out:
        args.out.write_text(json.dumps({"date": date.today().isoformat(), "machine": machine(),
                                        "command": "bench/lease_scale.py " + " ".join(sys.argv[1:]),
                                        "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
