"""Fleet benchmark: completed trials per second, lease and result latency with hundreds of
simulated workers over real HTTP against one control plane on Postgres, and the same
workload through Optuna's RDBStorage ask/tell on the same database server.

    .venv/bin/python bench/fleet.py                      # every scenario, writes bench/results/fleet.{md,json}
    .venv/bin/python bench/fleet.py --scenarios single --trials 2000 --no-write

Scenarios (NSGA-II, parallelism twice the workers by default (--slack), capped at the study limit):
  single   200 workers, one study of 10,000 trials (late_over_early: the time of trials
           9,000-10,000 over that of trials 0-1,000)
  studies  200 workers, 20 concurrent studies of 500 trials
  wide     1,000 workers, one study
  paced    200 workers whose trials take --trial-s each on average (2 s: about 100 trials/s
           offered; each between half and one and a half times that, and each agent's first
           long-poll, at the start, not counted), one study: the latency a fleet sees when
           the control plane is not the bottleneck.
           With workers that answer at once, each always has a request in flight, so a
           lease and a result together take workers / trials_per_s on average (Little's
           law: 1 s at 200 workers and 200 trials/s), whatever the server's own time
  rdb      Optuna RDBStorage ask/tell on the same Postgres: threads ask and tell at once

The simulated workers run in another process (bench/fleet_clients.py) so that their CPU
is not the server's; the server is `paretune serve` as users run it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import cpu_seconds, create_postgres_database, drop_postgres_database, start_service  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MAX_PARALLELISM = 1000


def study_document(name: str, trials: int, parallelism: int, seed: int) -> dict[str, Any]:
    return {
        "name": name, "kernel": {"backend": "python", "source": "bench:fleet"},
        "space": [{"name": "x", "type": "float", "low": 0, "high": 1, "default": 0.5},
                  {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}],
        "objectives": ["f1", "f2"], "sampler": {"name": "nsga2", "seed": seed},
        "budget": {"max_trials": trials}, "parallelism": min(parallelism, MAX_PARALLELISM),
    }


def server_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its live children (a server of several processes)."""
    return cpu_seconds(pid) + children_cpu_seconds(pid)


def children(pid: int) -> set[int]:
    """A process's live children (a scheduler process, uvicorn's workers), started by any of
    its threads (a scheduler process by a keeper thread)."""
    found: set[int] = set()
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(FileNotFoundError):
            found.update(map(int, listing.read_text().split()))
    return found


def children_cpu_seconds(pid: int) -> float:
    """CPU time of a process's live children alone."""
    total = 0.0
    for process in children(pid):
        with contextlib.suppress(FileNotFoundError):
            total += cpu_seconds(process)
    return total


def python_loop_s() -> float:
    """Seconds for a fixed pure-Python loop (best of three): these 2-core machines differ
    severalfold in speed from one run to another, and the control plane is Python."""
    def once() -> float:
        started, total = time.perf_counter(), 0
        for i in range(10_000_000):
            total += i
        return time.perf_counter() - started

    return round(min(once() for _ in range(3)), 2)


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    memory = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return f"{os.cpu_count()} cores, {memory:.0f} GiB, {model}; PostgreSQL on the same machine; no Redis"


def run_fleet(name: str, workers: int, studies: int, trials_per_study: int, env: dict[str, str],
              processes: int = 1, scheduler_process: bool = True, trial_s: float = 0.0,
              slack: float = 2.0) -> dict[str, Any]:
    db_url = create_postgres_database()
    workdir = Path(tempfile.mkdtemp(prefix="fleet-"))
    steps = "--scheduler-process" if scheduler_process else "--no-scheduler-process"
    service = start_service(db_url, workdir, env, ("--processes", str(processes), steps))
    try:
        admin = service.client()
        parallelism = max(1, int(slack * workers) // studies)
        for i in range(studies):
            r = admin.post("/v1/studies", json=study_document(f"{name}-{i}", trials_per_study, parallelism, seed=i))
            r.raise_for_status()
        token_file = workdir / "worker-token"
        token_file.write_text(service.make_worker_token())
        out = workdir / "clients.json"
        total = studies * trials_per_study
        own_before, children_before = cpu_seconds(service.process.pid), children_cpu_seconds(service.process.pid)
        started = time.monotonic()
        clients = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fleet_clients.py"), service.url,
                                    str(token_file), "--workers", str(workers), "--until", str(total),
                                    "--seconds", "900", "--trial-s", str(trial_s), "--out", str(out)])
        try:
            if clients.wait() != 0:
                raise RuntimeError(f"the simulated workers exited with status {clients.returncode}")
        finally:
            if clients.poll() is None:
                clients.kill()
                clients.wait()
        wall = time.monotonic() - started
        children_cpu = children_cpu_seconds(service.process.pid) - children_before
        server_cpu = cpu_seconds(service.process.pid) - own_before + children_cpu  # the server's processes together
        data = json.loads(out.read_text())
        finished = _finished(admin, studies)
    finally:
        service.stop()
        drop_postgres_database(db_url)
    row = _summary(name, workers, studies, trials_per_study, data, wall, server_cpu, finished, processes)
    if scheduler_process and row["completed"]:  # its share of the server's CPU
        row["scheduler_cpu_ms_per_trial"] = round(1000 * children_cpu / row["completed"], 2)
    return row | {"scheduler_process": scheduler_process, "trial_s": trial_s, "slack": slack}


def _finished(admin: Any, studies: int) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = admin.get("/v1/studies", params={"limit": 500}).json()["items"]
        if all(s["state"] == "completed" for s in items):
            return len(items)
        time.sleep(0.5)
    return sum(s["state"] == "completed" for s in admin.get("/v1/studies").json()["items"])


def _summary(name: str, workers: int, studies: int, per_study: int, data: dict[str, Any], wall: float,
             server_cpu: float, finished: int, processes: int) -> dict[str, Any]:
    done = sorted(data["done_at"])
    total = len(done)
    span = done[-1] - done[0] if total > 1 else float("nan")
    row: dict[str, Any] = {
        "scenario": name, "server_processes": processes, "workers": workers, "studies": studies,
        "trials_per_study": per_study,
        "completed": total, "studies_completed": finished, "errors": data["error_count"],
        "trials_per_s": round((total - 1) / span, 1) if total > 1 else 0.0,
        "long_polls": len(data["lease_ms"]),  # the other leases came with a result
        "lease_p50_ms": _percentile(data["lease_ms"], 50),
        "lease_p99_ms": _percentile(data["lease_ms"], 99),
        "result_p50_ms": _percentile(data["result_ms"], 50),
        "result_p99_ms": _percentile(data["result_ms"], 99),
        "server_cores": round(server_cpu / wall, 2), "wall_s": round(wall, 1),
        # the server's CPU time (its processes') over the run, per completed trial
        "server_cpu_ms_per_trial": round(1000 * server_cpu / total, 2) if total else None,
        "error_examples": data["errors"][:5],
    }
    if total >= 10_000:
        row["late_over_early"] = round((done[9_999] - done[9_000]) / (done[999] - done[0]), 2)
    return row


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def run_rdb(workers: int, trials: int, seconds: float) -> dict[str, Any]:
    """Optuna's own shared storage: threads ask and tell NSGA-II trials at once."""
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db_url = create_postgres_database()
    try:
        url = db_url.replace("postgresql://", "postgresql+psycopg://")
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_size": workers, "max_overflow": 0})
        study = optuna.create_study(storage=storage, directions=["minimize", "minimize"],
                                    sampler=optuna.samplers.NSGAIISampler(seed=1))
        space = {"x": FloatDistribution(0, 1), "y": IntDistribution(1, 10)}
        sys.path.insert(0, str(ROOT / "bench"))
        from fleet_clients import objective

        count, lock = [0], threading.Lock()
        deadline = time.monotonic() + seconds

        def work() -> None:
            while time.monotonic() < deadline:
                with lock:
                    if count[0] >= trials:
                        return
                trial = study.ask(space)
                values = objective(trial.params)
                study.tell(trial, [values["f1"], values["f2"]])
                with lock:
                    count[0] += 1

        started = time.monotonic()
        threads = [threading.Thread(target=work) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        storage.engine.dispose()
    finally:
        drop_postgres_database(db_url)
    return {"scenario": "rdb", "workers": workers, "completed": count[0], "wall_s": round(elapsed, 1),
            "trials_per_s": round(count[0] / elapsed, 1)}


COLUMNS = ["scenario", "server_processes", "scheduler_process", "workers", "trial_s", "slack", "studies", "completed",
           "errors", "trials_per_s", "long_polls", "lease_p50_ms", "lease_p99_ms", "result_p50_ms", "result_p99_ms",
           "late_over_early", "server_cores", "server_cpu_ms_per_trial", "scheduler_cpu_ms_per_trial", "wall_s",
           "vs_rdb"]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [" | ".join(COLUMNS), " | ".join("---" for _ in COLUMNS)]
    lines += [" | ".join("" if row.get(c) is None else str(row[c]) for c in COLUMNS) for row in rows]
    return "\n".join(lines)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(table(rows), flush=True)


def write_markdown(summary: dict[str, Any]) -> None:
    """bench/results/fleet.md: the table with the run's date, machine and command (the
    reading is added by hand below the marker and kept when the file is rewritten)."""
    path = RESULTS / "fleet.md"
    marker = "<!-- reading -->"
    reading = path.read_text().split(marker, 1)[1] if path.exists() and marker in path.read_text() else "\n"
    path.write_text(
        "# Fleet benchmark: simulated workers over real HTTP against one control plane on Postgres\n\n"
        f"- date: {summary['date']}\n- machine: {summary['machine']}; a 10,000,000-step Python loop takes "
        f"{summary['python_loop_s']} s (the speed of this host)\n- command: `{summary['command']}`\n"
        "- method: bench/fleet.py's docstring; the simulated workers answer at once (bench/fleet_clients.py, "
        "another process; in `paced`, after trial_s) and take their next lease with each result when one is "
        "queued; lease times are those of "
        "the long-polls (the wait for a queued trial included; long_polls counts them, the other leases came "
        "with a result), result times include a lease handed out with it.\n"
        f"- Optuna RDBStorage on the same database, same run: {summary['rows'][-1].get('optuna_rdb_trials_per_s')} "
        "trials/s\n\n" + table(summary["rows"]) + "\n\n" + marker + reading)


def _stop_on_sigterm() -> None:
    """A SIGTERM (a timeout) unwinds like Ctrl-C, so the service and the simulated workers
    this benchmark started are stopped rather than left running."""
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def main() -> None:
    _stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="single,studies,wide,paced,rdb")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--trials", type=int, default=10_000, help="trials of the single-study scenario")
    parser.add_argument("--wide-workers", type=int, default=1000)
    parser.add_argument("--trial-s", type=float, default=2.0, help="how long each trial of the paced scenario takes")
    parser.add_argument("--paced-trials", type=int, default=4000)
    parser.add_argument("--rdb-workers", default="8,32", help="thread counts tried for RDBStorage (best kept)")
    parser.add_argument("--rdb-seconds", type=float, default=60.0)
    parser.add_argument("--server-processes", type=int, default=1, help="paretune serve --processes")
    parser.add_argument("--scheduler-process", action=argparse.BooleanOptionalAction, default=True,
                        help="paretune serve --[no-]scheduler-process: the steps in a process of their own (serve's "
                        "default on Postgres) or in the server process")
    parser.add_argument("--slack", type=float, default=2.0,
                        help="a study's parallelism over the workers it has (1: no trial queued ahead of a worker)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    env = {"PARETUNE_LEASE_S": "60", "PARETUNE_POLL_INTERVAL_S": "0.5"}
    loop_s = python_loop_s()
    rows: list[dict[str, Any]] = []
    serving = {"processes": args.server_processes, "scheduler_process": args.scheduler_process, "slack": args.slack}
    for scenario in args.scenarios.split(","):
        if scenario == "single":
            rows.append(run_fleet("single", args.workers, 1, args.trials, env, **serving))
        elif scenario == "studies":
            rows.append(run_fleet("studies", args.workers, 20, 500, env, **serving))
        elif scenario == "wide":
            rows.append(run_fleet("wide", args.wide_workers, 1, 5 * args.wide_workers, env, **serving))
        elif scenario == "paced":
            rows.append(run_fleet("paced", args.workers, 1, args.paced_trials, env, trial_s=args.trial_s, **serving))
        elif scenario == "rdb":
            tries = [run_rdb(int(w), args.trials, args.rdb_seconds) for w in args.rdb_workers.split(",")]
            rows.append(max(tries, key=lambda r: r["trials_per_s"]) | {"tried": tries})
        print_table(rows)
    rdb = next((r["trials_per_s"] for r in rows if r["scenario"] == "rdb"), None)
    for row in rows:
        row["optuna_rdb_trials_per_s"] = rdb
        if rdb and row["scenario"] != "rdb":
            row["vs_rdb"] = round(row["trials_per_s"] / rdb, 1)
    summary = {"date": date.today().isoformat(), "machine": machine(), "python_loop_s": loop_s,
               "command": "python " + " ".join(sys.argv), "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    print_table(rows)
    if not args.no_write:
        (RESULTS / "fleet.json").write_text(json.dumps(summary, indent=1) + "\n")
        write_markdown(summary)


if __name__ == "__main__":
    main()
