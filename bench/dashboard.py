"""How fast a study with many trials opens in the dashboard, in headless Chromium.

Starts `paretune serve` on a free port, fills a study through the real worker protocol
(scripted workers leasing each trial and reporting a synthetic GEMM, several at once; the
filled database, a SQLite file under .paretune/ or a Postgres database named after the
trial count, is kept and reused), then opens the study page in fresh browser contexts (no
HTTP cache) and reads the page's own performance marks, measured from navigation start:

  front-drawn  the Pareto scatter has drawn the front and the baseline
  table        the first page of the all-trials table is shown
  ready        the later of the two: the number the target (< 1.5 s at 100,000 trials) is about
  cloud        every trial is plotted (read from the points endpoint once the page is ready)

and, from the Resource Timing of the points request: when it was sent (points-sent), how
long the server took to its first byte (points-server) and when its last byte arrived
(points-in).

    .venv/bin/python bench/dashboard.py --trials 100000 --db postgres --runs 7
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "web")]

from gemm_worker import GemmWorker, study_document  # noqa: E402
from helpers import POSTGRES_ADMIN_URL, LiveService, start_service  # noqa: E402
from pages import CHROMIUM, CHROMIUM_ARGS, VIEWPORT  # noqa: E402

MARKS = ("front-drawn", "table", "cloud")
POINTS = ("points-sent", "points-server", "points-in")


def populate(service: LiveService, trials: int, sampler: str, workers: int) -> tuple[int, str]:
    """The id of a finished study with `trials` trials, creating it if the database has none."""
    name = f"bench-{trials}"
    with service.client() as api:
        found = [s for s in api.get("/v1/studies", params={"limit": 500}).json()["items"] if s["name"] == name]
        if found and found[0]["state"] == "completed":
            return int(found[0]["id"]), "reused"
        if found:  # an earlier fill that was stopped: its leases expire and it goes on
            study_id = int(found[0]["id"])
        else:
            r = api.post("/v1/studies", json=study_document(name, trials, sampler=sampler, parallelism=16, seed=11))
            r.raise_for_status()
            study_id = int(r.json()["id"])
    started = time.perf_counter()
    done = Counter(trials)
    token = service.make_worker_token()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda i: fill(service, study_id, token, f"gpu-node-{i:02d}", done), range(workers)))
    took = time.perf_counter() - started
    return study_id, f"populated by {workers} scripted workers in {took / 60:.1f} min, {done.n / took:.0f} trials/s"


class Counter:
    """Results posted by every worker, printed as they grow."""

    def __init__(self, total: int) -> None:
        self.n, self.total, self.lock, self.started = 0, total, threading.Lock(), time.perf_counter()

    def add(self, n: int) -> None:
        with self.lock:
            self.n += n
            rate = self.n / (time.perf_counter() - self.started)
            print(f"  populated {self.n}/{self.total} trials ({rate:.0f}/s)", file=sys.stderr, flush=True)


def fill(service: LiveService, study_id: int, token: str, name: str, done: Counter) -> None:
    """One scripted worker: lease and report (each result asking for the next lease, as the
    agent does) until the study has finished."""
    worker = GemmWorker(service.url, token, name=name)
    try:
        with service.client() as api:
            while api.get(f"/v1/studies/{study_id}").json()["state"] not in ("completed", "failed", "cancelled"):
                done.add(worker.run(limit=500, fail_every=47, next_lease=True))
    finally:
        worker.close()


def measure(browser: Any, url: str, token: str, study_id: int, timeout_s: float) -> dict[str, float]:
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"localStorage.setItem('paretune.token', {token!r})")
    page = context.new_page()
    try:
        page.goto(f"{url}/ui/studies/{study_id}")
        page.wait_for_function(
            "() => ['front-drawn', 'table', 'cloud'].every(m => performance.getEntriesByName('paretune:' + m).length)",
            timeout=timeout_s * 1000,
        )
        marks = page.evaluate(
            "(names) => Object.fromEntries(names.map("
            "n => [n, performance.getEntriesByName('paretune:' + n)[0].startTime]))",
            list(MARKS),
        )
        counts = page.evaluate(
            "() => ({plotted: +document.querySelector('#scatter canvas').dataset.count,"
            " front: JSON.parse(document.querySelector('#scatter canvas').dataset.marks).length,"
            " rows: document.querySelectorAll('#trials tbody tr[data-number]').length})"
        )
        points = page.evaluate(
            "() => { const r = performance.getEntriesByType('resource').find(e => e.name.includes('/points?since=0'));"
            " return {'points-sent': r.requestStart, 'points-server': r.responseStart - r.requestStart,"
            " 'points-in': r.responseEnd, bytes: r.encodedBodySize}; }"
        )
    finally:
        context.close()
    ms = {k: float(v) for k, v in marks.items()}
    ms["ready"] = max(ms["front-drawn"], ms["table"])
    return {**ms, **{k: float(v) for k, v in {**counts, **points}.items()}}


def kept_postgres_database(name: str, fresh: bool) -> str:
    """The URL of database `name` on the test server, created if it is missing (dropped
    first if `fresh`)."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    return POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    return (f"{cpu}, {os.cpu_count()} CPUs, {mem_kb / 2**20:.0f} GiB RAM; {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}; {version}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7,
                        help="page loads to time, each in a fresh context (0: only fill the study)")
    parser.add_argument("--db", default="sqlite", choices=("sqlite", "postgres"),
                        help="sqlite: a file under .paretune/; postgres: a database on the test server named after"
                             " the trial count; either is kept and reused by later runs")
    parser.add_argument("--fresh", action="store_true", help="fill the study again in an empty database")
    parser.add_argument("--sampler", default="nsga2")
    parser.add_argument("--workers", type=int, default=4, help="scripted workers filling the study at once")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    workdir = REPO / ".paretune" / f"bench-dashboard-{args.trials}"
    workdir.mkdir(parents=True, exist_ok=True)
    if args.db == "postgres":
        db = kept_postgres_database(f"paretune_bench_dashboard_{args.trials}", args.fresh)
    else:
        db = f"sqlite:///{workdir / 'paretune.db'}"
        if args.fresh:
            for path in workdir.glob("paretune.db*"):
                path.unlink()
    service = start_service(db, workdir)
    try:
        study_id, how = populate(service, args.trials, args.sampler, args.workers)
        print(f"database: {args.db}; study {study_id} ({how})")
        if not args.runs:
            return
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                runs = [measure(browser, service.url, service.admin_token, study_id, args.timeout)
                        for _ in range(args.runs)]
            finally:
                browser.close()
    finally:
        service.stop()

    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine()}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"plotted {runs[0]['plotted']:.0f} trials, {runs[0]['front']:.0f} front+baseline marks, "
          f"{runs[0]['rows']:.0f} table rows; points answer {runs[0]['bytes'] / 1e6:.1f} MB")
    columns = ("ready", *MARKS, *POINTS)
    print("ms from navigation start, per run: " + "  ".join(columns))
    for i, run in enumerate(runs, 1):
        print(f"  run {i}: " + "  ".join(f"{run[k]:7.0f}" for k in columns))
    ready = [r["ready"] for r in runs]
    print(f"ready (front drawn and first table page shown): median {statistics.median(ready):.0f} ms, "
          f"max {max(ready):.0f} ms; target < 1500 ms: {'met' if statistics.median(ready) < 1500 else 'NOT met'}")
    cloud = [r["cloud"] for r in runs]
    print(f"all trials plotted: median {statistics.median(cloud):.0f} ms, max {max(cloud):.0f} ms; "
          f"target < 3000 ms: {'met' if statistics.median(cloud) < 3000 else 'NOT met'}")


if __name__ == "__main__":
    main()
