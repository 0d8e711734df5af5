"""How fast a study with many trials opens in the dashboard, in headless Chromium.

Starts `paretune serve` on a free port, fills a study through the real worker protocol (a
scripted worker reporting a synthetic GEMM; the populated database is kept and reused), then
opens the study page in fresh browser contexts (no HTTP cache) and reads the page's own
performance marks, measured from navigation start:

  front-drawn  the Pareto scatter has drawn the front and the baseline
  table        the first page of the all-trials table is shown
  ready        the later of the two: the number the target (< 1.5 s) is about
  cloud        every trial is plotted (streamed over the event stream after the page is ready)

    .venv/bin/python bench/dashboard.py --trials 10000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "web")]

from gemm_worker import GemmWorker, study_document  # noqa: E402
from helpers import (  # noqa: E402
    LiveService,
    create_postgres_database,
    drop_postgres_database,
    start_service,
)
from pages import CHROMIUM, CHROMIUM_ARGS, VIEWPORT  # noqa: E402

MARKS = ("front-drawn", "table", "cloud")


def populate(service: LiveService, trials: int, sampler: str) -> tuple[int, str]:
    """The id of a finished study with `trials` trials, creating it if the database has none."""
    name = f"bench-{trials}"
    with service.client() as api:
        for study in api.get("/v1/studies", params={"limit": 500}).json()["items"]:
            if study["name"] == name and study["state"] == "completed":
                return int(study["id"]), "reused"
        doc = study_document(name, trials, sampler=sampler, parallelism=16, seed=11)
        r = api.post("/v1/studies", json=doc)
        r.raise_for_status()
        study_id = int(r.json()["id"])
    worker = GemmWorker(service.url, service.make_worker_token())
    started = time.perf_counter()
    done = 0
    try:
        while True:
            n = worker.run(limit=500, fail_every=47)
            done += n
            if not n:
                break
            rate = done / (time.perf_counter() - started)
            print(f"  populated {done}/{trials} trials ({rate:.0f}/s)", file=sys.stderr, flush=True)
    finally:
        worker.close()
    return study_id, f"populated at {done / (time.perf_counter() - started):.0f} trials/s"


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
    finally:
        context.close()
    ms = {k: float(v) for k, v in marks.items()}
    ms["ready"] = max(ms["front-drawn"], ms["table"])
    return {**ms, **{k: float(v) for k, v in counts.items()}}


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
    parser.add_argument("--runs", type=int, default=5, help="page loads to time, each in a fresh context")
    parser.add_argument("--db", default=None,
                        help="database URL; 'postgres' for a fresh database on the test server, dropped after"
                             " (default: a SQLite file kept under .paretune/ and reused)")
    parser.add_argument("--sampler", default="nsga2")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    workdir = REPO / ".paretune" / f"bench-dashboard-{args.trials}"
    workdir.mkdir(parents=True, exist_ok=True)
    fresh_postgres = args.db == "postgres"
    db = create_postgres_database() if fresh_postgres else args.db or f"sqlite:///{workdir / 'paretune.db'}"
    service = start_service(db, workdir)
    try:
        study_id, how = populate(service, args.trials, args.sampler)
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
        if fresh_postgres:
            drop_postgres_database(db)

    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine()}")
    print(f"database: {db.split(':', 1)[0]}; study {study_id} ({how})")
    print(f"plotted {runs[0]['plotted']:.0f} trials, {runs[0]['front']:.0f} front+baseline marks, "
          f"{runs[0]['rows']:.0f} table rows")
    print("ms from navigation start, per run: " + "  ".join(f"{k}" for k in ("ready", *MARKS)))
    for i, run in enumerate(runs, 1):
        print(f"  run {i}: " + "  ".join(f"{run[k]:7.0f}" for k in ("ready", *MARKS)))
    ready = [r["ready"] for r in runs]
    print(f"ready (front drawn and first table page shown): median {statistics.median(ready):.0f} ms, "
          f"max {max(ready):.0f} ms; target < 1500 ms: {'met' if max(ready) < 1500 else 'NOT met'}")
    print(f"all trials plotted: median {statistics.median(r['cloud'] for r in runs):.0f} ms")


if __name__ == "__main__":
    main()
