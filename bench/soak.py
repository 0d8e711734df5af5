"""Soak benchmark: the paced fleet for an hour on Postgres, with several teams whose studies
are created and finish throughout, and trial retention on; whether memory, latency and the
database stay flat.

    .venv/bin/python bench/soak.py --minutes 60 --out bench/results/soak.json

200 simulated workers (bench/fleet_clients.py, another process) whose trials take 1-3 s;
four teams (weights 2:1:1:1 in the pool) each keep two studies running, a new one created as
one finishes. A study's budget is drawn between (1 - --study-spread) and (1 + --study-spread)
times --study-trials, so that studies end at different times as a team's would; with a spread
of 0 every study has the same budget, and those created together end together, in cohorts
that leave the queue short until their successors' first trials are queued. Retention deletes
the trials of studies finished more than --retention-minutes ago (but for their fronts and
baselines) while leases go on.

Every minute: trials/s, result latency p50/p99 (each result brings the next lease, so the
lease is included), the server's RSS and CPU seconds (its processes together: the serving
process or processes, --server-processes, and the scheduler process; the largest process's
RSS beside the sum),
Postgres connections of the database, the trials table's and its indexes' sizes, live and
dead tuples, autovacuum runs, the sequential scans of the hot tables since the start, and
the trials queued and running; and the CPU per trial of the server and of the simulated
fleet. The fleet's work per result is fixed, so its CPU per result says how fast the machine
ran that minute: a host whose speed drifts moves it, and the server's with it, at the same
work. bench/host_speed.py runs beside the soak as a second reference: fixed pieces of Python
work timed every 10 s, whose medians per minute join the soak's rows. Flat: the last 10
minutes' mean RSS and p99 within 10% of minutes 5-15's (the CPU per trial and the
reference's work are compared the same way and reported beside it).

A Postgres server with autovacuum off (a test server may run so) gets it on for the soak's
duration and back off afterwards: a deployment runs with it on (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from fleet import _stop_on_sigterm, children, machine, server_cpu_seconds, study_document  # noqa: E402
from helpers import cpu_seconds, create_postgres_database, drop_postgres_database, start_service  # noqa: E402
from host_speed import WORK as HOST_WORK  # noqa: E402
from host_speed import windows  # noqa: E402

TEAMS = {"t1": 2.0, "t2": 1.0, "t3": 1.0, "t4": 1.0}
STUDIES_PER_TEAM = 2
HOT = ("trials", "studies", "pool_usage", "validation_jobs")


def rss_mb(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except FileNotFoundError:  # a child that ended between the listing and the read
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:")), 0.0)


def server_rss_mb(pid: int) -> dict[str, float]:
    """The RSS of the server's processes together, and of the largest of them."""
    sizes = [rss_mb(p) for p in (pid, *children(pid))]
    return {"rss_mb": round(sum(sizes), 1), "largest_rss_mb": round(max(sizes), 1)}


class Studies:
    """Keeps every team at STUDIES_PER_TEAM running studies."""

    def __init__(self, service: Any, tokens: dict[str, str], trials: int, spread: float, parallelism: int) -> None:
        self.clients = {team: service.client(token) for team, token in tokens.items()}
        self.trials, self.spread, self.parallelism = trials, spread, parallelism
        self.created = 0
        self.finished = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.top_up()
            except Exception as exc:  # counted; the soak goes on
                self.errors.append(repr(exc)[:200])
            self.stop.wait(0.5)

    def top_up(self) -> None:
        running = 0
        for team, client in self.clients.items():
            items = client.get("/v1/studies", params={"state": "running", "limit": 500}).json()["items"]
            running += len(items)
            for _ in range(STUDIES_PER_TEAM - len(items)):
                rng = np.random.default_rng(self.created)
                trials = round(self.trials * rng.uniform(1 - self.spread, 1 + self.spread))
                doc = study_document(f"{team}-{self.created}", trials, self.parallelism, seed=self.created)
                client.post("/v1/studies", json=doc).raise_for_status()
                self.created += 1
                running += 1
        self.finished = self.created - running


def set_autovacuum(engine: Any, on: bool) -> bool:
    """Turn the server's autovacuum on, or (False) back to what its configuration says;
    whether it was on before."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        was = c.execute(text("show autovacuum")).scalar() == "on"
        if was != on:
            c.execute(text("alter system set autovacuum = on" if on else "alter system reset autovacuum"))
            c.execute(text("select pg_reload_conf()"))
    return was


def sample(engine: Any, database: str, pid: int) -> dict[str, Any]:
    with engine.connect() as c:
        row: dict[str, Any] = {
            **server_rss_mb(pid),
            "pg_connections": c.execute(text("select count(*) from pg_stat_activity where datname = :d"),
                                        {"d": database}).scalar(),
            "trials_mb": round(c.execute(text("select pg_table_size('trials')")).scalar() / 2**20, 1),
            "trials_indexes_mb": round(c.execute(text("select pg_indexes_size('trials')")).scalar() / 2**20, 1),
        }
        for state in ("queued", "running"):  # a shallow queue: workers wait, and steps batch fewer results
            row[f"trials_{state}"] = c.execute(text("select count(*) from trials where state = :s"),
                                               {"s": state}).scalar()
        for r in c.execute(text("select relname, n_live_tup, n_dead_tup, autovacuum_count, seq_scan "
                                "from pg_stat_user_tables where relname = any(:t)"), {"t": list(HOT)}):
            row[f"{r.relname}_live"] = r.n_live_tup
            row[f"{r.relname}_dead"] = r.n_dead_tup
            row[f"{r.relname}_autovacuums"] = r.autovacuum_count
            row[f"{r.relname}_seq_scans"] = r.seq_scan  # since the start: flat where nothing reads the whole table
    return row


def per_minute(data: dict[str, Any], started: float, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = np.array(data["done_at"]) - started
    latency = np.array(data["result_ms"])
    rows = []
    for s in samples:
        m = s["minute"]
        inside = (done >= (m - 1) * 60) & (done < m * 60)
        lat = latency[inside]
        count = int(inside.sum())
        per_trial = {f"{who}_cpu_ms_per_trial": round(1000 * s[f"{who}_cpu_s"] / count, 2) if count else None
                     for who in ("server", "clients")}
        rows.append({**s, **per_trial, "trials_per_s": round(count / 60, 1),
                     "result_p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
                     "result_p99_ms": round(float(np.percentile(lat, 99)), 1) if lat.size else None})
    return rows


def with_host_speed(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The soak's rows with the reference's medians of the same minutes (bench/host_speed.py)."""
    if not path.exists():
        print(f"bench/host_speed.py left no {path.name}: the rows go without the host's speed", file=sys.stderr)
        return rows
    speed = {r["minute"]: r for r in json.loads(path.read_text())["minutes"]}
    return [{**r, **{k: speed.get(r["minute"], {}).get(k) for k in HOST_WORK}} for r in rows]


def flatness(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("rss_mb", "largest_rss_mb", "result_p99_ms", "trials_per_s", "server_cpu_ms_per_trial",
                "clients_cpu_ms_per_trial", *HOST_WORK):
        early, late = windows(rows, key)
        digits = 1 if early >= 10 else 3  # CPU ms per trial: under one for the fleet's clients
        out[key] = {"minutes_5_15": round(early, digits), "last_10": round(late, digits),
                    "ratio": round(late / early, 3)}
    out["flat"] = all(abs(out[k]["ratio"] - 1) <= 0.10 for k in ("rss_mb", "largest_rss_mb", "result_p99_ms"))
    return out


def main() -> None:
    _stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--trial-s", type=float, default=2.0)
    parser.add_argument("--study-trials", type=int, default=1500)
    parser.add_argument("--study-spread", type=float, default=0.5)
    parser.add_argument("--retention-minutes", type=float, default=5.0)
    parser.add_argument("--server-processes", type=int, default=1, help="paretune serve --processes")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.server_processes < 1:
        parser.error("--server-processes must be at least 1")
    if not 0 <= args.study_spread < 1:
        parser.error("--study-spread must be at least 0 and under 1 (budgets between 1 - spread and 1 + spread times "
                     "--study-trials)")

    db_url = create_postgres_database()
    database = db_url.rsplit("/", 1)[1]
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    env = {"PARETUNE_TRIAL_RETENTION_DAYS": str(args.retention_minutes / 1440)}
    service = start_service(db_url, work, env, ("--processes", str(args.server_processes)))
    engine = create_engine(db_url, pool_size=1)
    autovacuum_was = set_autovacuum(engine, True)
    clients: subprocess.Popen[bytes] | None = None
    host: subprocess.Popen[bytes] | None = None
    studies: Studies | None = None
    try:
        admin = service.client()
        tokens = {team: service.make_user_token("admin", team) for team in TEAMS}
        admin.put("/v1/pools/default", json={"teams": {t: {"weight": w} for t, w in TEAMS.items()}}).raise_for_status()
        parallelism = max(1, args.workers // (len(TEAMS) * STUDIES_PER_TEAM) + 10)
        studies = Studies(service, tokens, args.study_trials, args.study_spread, parallelism)
        studies.top_up()
        studies.thread.start()
        token_file = work / "worker-token"
        token_file.write_text(service.make_worker_token())
        out = work / "clients.json"
        host = subprocess.Popen([sys.executable, str(ROOT / "bench" / "host_speed.py"), "--minutes",
                                 str(args.minutes), "--out", str(work / "host.json")], stdout=subprocess.DEVNULL)
        cpu_before = server_cpu_seconds(service.process.pid)
        started = time.monotonic()
        clients = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fleet_clients.py"), service.url,
                                    str(token_file), "--workers", str(args.workers), "--until", "100000000",
                                    "--seconds", str(args.minutes * 60), "--trial-s", str(args.trial_s),
                                    "--out", str(out)])
        samples = []
        cpu_at, clients_at = cpu_before, 0.0
        for minute in range(1, args.minutes + 1):
            time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
            cpu_now, clients_now = server_cpu_seconds(service.process.pid), cpu_seconds(clients.pid)
            samples.append({"minute": minute, **sample(engine, database, service.process.pid),
                            "server_cpu_s": round(cpu_now - cpu_at, 1),
                            "clients_cpu_s": round(clients_now - clients_at, 2),
                            "studies_created": studies.created, "studies_completed": studies.finished})
            cpu_at, clients_at = cpu_now, clients_now
            print(json.dumps(samples[-1]), flush=True)
        clients.wait(timeout=300)
        host.wait(timeout=120)
        studies.stop.set()
        studies.thread.join(30)
        wall = time.monotonic() - started
        server_cpu = server_cpu_seconds(service.process.pid) - cpu_before
        data = json.loads(out.read_text())
    finally:
        for process in (clients, host):
            if process is not None and process.poll() is None:
                process.kill()
        if studies is not None:
            studies.stop.set()
        service.stop()
        set_autovacuum(engine, autovacuum_was)
        engine.dispose()
        drop_postgres_database(db_url)
    rows = with_host_speed(per_minute(data, started, samples), work / "host.json")
    summary = {
        "date": date.today().isoformat(), "machine": machine(),
        "command": "bench/soak.py " + " ".join(sys.argv[1:]),
        "server_processes": args.server_processes, "workers": args.workers, "trial_s": args.trial_s, "teams": TEAMS,
        "study_trials": args.study_trials, "study_spread": args.study_spread,
        "retention_minutes": args.retention_minutes, "autovacuum_was_on": autovacuum_was,
        "completed": len(data["done_at"]), "errors": data["error_count"], "error_examples": data["errors"][:5],
        "studies_created": studies.created, "study_errors": studies.errors[:5],
        "server_cpu_ms_per_trial": round(1000 * server_cpu / max(1, len(data["done_at"])), 2),
        "wall_s": round(wall, 1), "flatness": flatness(rows), "minutes": rows,
    }
    args.out.write_text(json.dumps(summary, indent=2))
    keys = ("minute", "trials_per_s", "result_p50_ms", "result_p99_ms", "rss_mb", "largest_rss_mb", "server_cpu_s",
            "server_cpu_ms_per_trial", "clients_cpu_ms_per_trial", "request_ms", "lookups_ms",
            "pg_connections", "trials_mb", "trials_indexes_mb", "trials_live", "trials_dead", "trials_autovacuums",
            "trials_seq_scans", "trials_queued")
    print("\n" + " ".join(f"{k:>17}" for k in keys))
    for r in rows:
        print(" ".join(f"{r.get(k)!s:>17}" for k in keys))
    print(json.dumps(summary["flatness"]))


if __name__ == "__main__":
    main()
