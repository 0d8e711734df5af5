"""A scripted worker that speaks the real HTTP protocol and computes a known test function.

Usable in-process (`run(client, ...)`) or as a subprocess:
`python tests/fake_worker.py URL TOKEN [--stall-after N] [--max N]` (stalls forever holding a
lease after N results, so that a test can kill it between lease and result).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import httpx


def objective(config: dict[str, Any]) -> dict[str, float]:
    """ZDT1-like trade-off over x in [0, 1] and an integer y: f1 falls as f2 rises."""
    x, y = float(config["x"]), int(config["y"])
    g = 1.0 + 9.0 * (y - 1) / 9.0
    f1 = x
    f2 = g * (1.0 - math.sqrt(x / g))
    return {"f1": f1, "f2": f2, "power_w": 100.0 + 50.0 * x}


def register(client: httpx.Client, backends: tuple[str, ...] = ("python",), pool: str = "default") -> int:
    body = {"name": "fake", "pool": pool, "fingerprint": {"hostname": "test", "backends": list(backends)}}
    r = client.post("/v1/workers/register", json=body)
    r.raise_for_status()
    return int(r.json()["worker_id"])


def lease(client: httpx.Client, worker_id: int, wait_s: float = 0.0) -> dict[str, Any] | None:
    r = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": wait_s})
    if r.status_code == 204:
        return None
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def result_for(trial: dict[str, Any]) -> dict[str, Any]:
    values = objective(trial["config"])
    return {"status": "completed", "metrics": {k: {"value": v} for k, v in values.items()},
            "timings": {"measure_s": 0.001}}


def run(client: httpx.Client, worker_id: int, max_results: int | None = None, wait_s: float = 0.0,
        stall_after: int | None = None, idle_exit: bool = True) -> int:
    """Lease and report until the queue is found empty (`idle_exit`) or `max_results` are in.
    The scheduler refills the queue after each result in its own time, so a run that must
    finish a study waits for it with `wait_s` > 0; with 0 it stops at the first dry look."""
    done = 0
    while max_results is None or done < max_results:
        held = lease(client, worker_id, wait_s)
        if held is None:
            if idle_exit:
                return done
            continue
        if stall_after is not None and done >= stall_after:
            print(f"stalling on trial {held['trial']['number']}", flush=True)
            while True:
                time.sleep(60)
        r = client.post(f"/v1/leases/{held['token']}/result", json=result_for(held["trial"]))
        r.raise_for_status()
        done += 1
    return done


def run_resilient(client: httpx.Client, delay_s: float) -> None:
    """Work like a real agent: `delay_s` per trial; a control plane or database that is
    away, or a lease that was lost, is waited out or dropped, never a reason to stop."""
    worker_id = None
    held = None
    while True:
        try:
            if worker_id is None:
                worker_id = register(client)
                print("registered", worker_id, flush=True)
            if held is None:
                r = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 2.0})
                if r.status_code == 404:
                    worker_id = None  # a database the service no longer has us in
                    continue
                r.raise_for_status()
                held = r.json() if r.status_code == 200 else None
                continue
            time.sleep(delay_s)
            r = client.post(f"/v1/leases/{held['token']}/result", json=result_for(held["trial"]))
            if r.status_code == 409:
                print(f"lease of trial {held['trial']['number']} lost: {r.text[:200]}", flush=True)
            else:
                r.raise_for_status()
            held = None
        except (httpx.HTTPError, ValueError) as exc:
            print(f"retrying after: {exc!r}"[:300], flush=True)
            time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("--stall-after", type=int, default=None)
    parser.add_argument("--max", type=int, default=None)
    parser.add_argument("--resilient", action="store_true", help="outlive outages, as an agent does")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each trial takes (--resilient)")
    args = parser.parse_args()
    with httpx.Client(base_url=args.url, timeout=60, headers={"Authorization": f"Bearer {args.token}"}) as client:
        if args.resilient:
            run_resilient(client, args.delay)
        worker_id = register(client)
        print("registered", worker_id, flush=True)
        run(client, worker_id, max_results=args.max, wait_s=5.0, stall_after=args.stall_after, idle_exit=False)


if __name__ == "__main__":
    main()
