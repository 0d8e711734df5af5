"""Fair-share benchmark: how the leases of one pool are shared between two teams.

16 simulated workers (threads speaking the real HTTP protocol) whose trials take 0.2-0.4 s.
Team A's study (parallelism 400) starts first; team B's (parallelism 8) starts 3 s later.
Reported per scenario: B's first lease after its creation, in trial times (0.3 s), and B's
share of all leases while B still had trials to lease (from its creation to its last lease).

    .venv/bin/python bench/fairness.py OUT.json [--scenarios equal,weighted,urgent]

Scenarios:
  equal     both teams at the pool's default weight: B's share should be 50% (its parallelism
            of 8 is half the 16 workers)
  weighted  A weight 3, B weight 1 in the pool: B's share should be 25%
  urgent    as equal, and a third study of team A with `priority: urgent` created 6 s after B:
            its first lease should come within one trial time (it preempts nothing)

A control plane that cannot set weights or priorities (first in, first out) runs only what it
can and says so in the row (`policy`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_worker import register, result_for  # noqa: E402
from helpers import create_postgres_database, drop_postgres_database, start_service  # noqa: E402

WORKERS = 16
TRIAL_S = (0.2, 0.4)
B_TRIALS = 160


def study(name: str, trials: int, parallelism: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "kernel": {"backend": "python", "source": "tests.fake:objective"},
        "space": [{"name": "x", "type": "float", "low": 0.0, "high": 1.0, "default": 0.5},
                  {"name": "y", "type": "int", "low": 1, "high": 10, "default": 3}],
        "objectives": ["f1", "f2"], "sampler": {"name": "random", "seed": 1},
        "budget": {"max_trials": trials}, "parallelism": parallelism, **extra,
    }


class Fleet:
    """Workers that lease, hold each trial 0.2-0.4 s, and report with the next lease asked for."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.leases: list[tuple[float, int]] = []  # (monotonic time, study id)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(WORKERS)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _got(self, lease: dict[str, Any]) -> None:
        with self.lock:
            self.leases.append((time.monotonic(), int(lease["trial"]["study_id"])))

    def _work(self, index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.token}"}) as c:
            worker_id = register(c)
            lease: dict[str, Any] | None = None
            while not self.stop.is_set():
                if lease is None:
                    r = c.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 2})
                    if r.status_code == 204:
                        continue
                    if r.status_code != 200:
                        self.errors.append(f"lease {r.status_code}: {r.text[:200]}")
                        time.sleep(0.5)
                        continue
                    lease = r.json()
                    self._got(lease)
                time.sleep(rng.uniform(*TRIAL_S))
                report = {**result_for(lease["trial"]), "next_lease": True}
                r = c.post(f"/v1/leases/{lease['token']}/result", json=report)
                if r.status_code != 200:
                    self.errors.append(f"result {r.status_code}: {r.text[:200]}")
                    lease = None
                    continue
                lease = r.json().get("next_lease")
                if lease is not None:
                    self._got(lease)


def run(scenario: str) -> dict[str, Any]:
    db_url = create_postgres_database()
    work = Path(tempfile.mkdtemp(prefix="fairness-"))
    service = start_service(db_url, work)
    try:
        admin = service.client()
        tokens = {team: service.make_user_token("admin", team) for team in ("a", "b")}
        weights = {"a": {"weight": 3}, "b": {"weight": 1}} if scenario == "weighted" else {}
        r = admin.put("/v1/pools/default", json={"teams": weights})
        policy = "fair share" if r.status_code == 200 else f"first in, first out (PUT /v1/pools: {r.status_code})"
        fleet = Fleet(service.url, service.make_worker_token())
        with service.client(tokens["a"]) as a, service.client(tokens["b"]) as b:
            a.post("/v1/studies", json=study("a sweep", 20_000, 400)).raise_for_status()
            fleet.start()
            time.sleep(3)
            b_created = time.monotonic()
            b_id = b.post("/v1/studies", json=study("b tune", B_TRIALS, 8)).raise_for_status().json()["id"]
            urgent_id, urgent_created = None, 0.0
            if scenario == "urgent":
                time.sleep(6)
                urgent_created = time.monotonic()
                r = a.post("/v1/studies", json=study("a urgent", 40, 4, priority="urgent"))
                if r.status_code == 201:
                    urgent_id = r.json()["id"]
                else:
                    policy = f"first in, first out (priority: {r.status_code})"
                    urgent_id = a.post("/v1/studies", json=study("a urgent", 40, 4)).raise_for_status().json()["id"]
            deadline = time.monotonic() + 300
            while b.get(f"/v1/studies/{b_id}").json()["state"] == "running" and time.monotonic() < deadline:
                time.sleep(0.5)
        fleet.close()
    finally:
        service.stop()
        drop_postgres_database(db_url)
    leases = sorted(fleet.leases)
    b_times = [t for t, s in leases if s == b_id]
    window = [s for t, s in leases if b_created <= t <= b_times[-1]] if b_times else []
    trial_s = sum(TRIAL_S) / 2
    row: dict[str, Any] = {
        "scenario": scenario, "policy": policy, "workers": WORKERS, "b_trials": B_TRIALS,
        "b_first_lease_trial_times": round((b_times[0] - b_created) / trial_s, 2) if b_times else None,
        "b_share": round(window.count(b_id) / len(window), 3) if window else None,
        "leases_in_window": len(window), "errors": fleet.errors[:5],
    }
    if urgent_id is not None:
        first = next((t for t, s in leases if s == urgent_id), None)
        row["urgent_first_lease_trial_times"] = round((first - urgent_created) / trial_s, 2) if first else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scenarios", default="equal,weighted,urgent")
    args = parser.parse_args()
    rows = []
    for scenario in args.scenarios.split(","):
        rows.append(run(scenario))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'scenario':10} {'policy':44} {'B first lease (trial times)':>28} {'B share':>8} {'urgent first':>13}")
    for r in rows:
        print(f"{r['scenario']:10} {r['policy'][:44]:44} {r['b_first_lease_trial_times']!s:>28} {r['b_share']!s:>8} "
              f"{r.get('urgent_first_lease_trial_times', '')!s:>13}")
    args.out.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
