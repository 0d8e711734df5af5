"""Simulated workers for bench/fleet.py: N agents speaking the real HTTP protocol from one
asyncio process, answering every trial at once with a known two-objective function.

    python bench/fleet_clients.py URL TOKEN_FILE --workers 200 --until 10000 --out result.json

Each agent registers, then leases (long-poll) and posts a result until the service has
received `--until` results from this process (or `--seconds` pass); each result asks for the
next lease, as the agent without prefetch does (`--no-next-lease`: every trial by long-poll). Every lease and result
latency is recorded with its completion time, so the caller can compute throughput over
any window. Connections are kept alive with an idle expiry shorter than the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import httpx


def objective(config: dict[str, Any]) -> dict[str, float]:
    x, y = float(config.get("x", 0.5)), int(config.get("y", 3))
    g = 1.0 + 9.0 * (y - 1) / 9.0
    return {"f1": x, "f2": g * (1.0 - math.sqrt(x / g))}


class Fleet:
    def __init__(self, url: str, token: str, workers: int, until: int, seconds: float, wait_s: float,
                 next_lease: bool = True) -> None:
        self.url, self.token, self.next_lease = url, token, next_lease
        self.workers, self.until, self.seconds, self.wait_s = workers, until, seconds, wait_s
        self.lease_ms: list[float] = []
        self.result_ms: list[float] = []
        self.done_at: list[float] = []  # monotonic time of each acknowledged result
        self.errors: list[str] = []
        self.empty_leases = 0
        self.stop = asyncio.Event()

    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        agents = [asyncio.create_task(self.agent(i)) for i in range(self.workers)]
        deadline = asyncio.create_task(asyncio.sleep(self.seconds))
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait([deadline, stopper], return_when=asyncio.FIRST_COMPLETED)
        self.stop.set()
        deadline.cancel()
        await asyncio.gather(*agents, return_exceptions=True)
        return {"started": started, "lease_ms": self.lease_ms, "result_ms": self.result_ms,
                "done_at": self.done_at, "errors": self.errors[:50], "error_count": len(self.errors),
                "empty_leases": self.empty_leases, "workers": self.workers}

    async def agent(self, index: int) -> None:
        """One worker with a connection of its own, as a real agent has (one client shared
        by hundreds of coroutines spends its time in its own connection pool)."""
        limits = httpx.Limits(max_connections=1, keepalive_expiry=30.0)
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, limits=limits,
                                     timeout=httpx.Timeout(120.0)) as client:
            body = {"name": f"sim-{index}", "pool": "default",
                    "fingerprint": {"hostname": "sim", "backends": ["python"]}}
            try:
                worker_id = (await self._post(client, "/v1/workers/register", body)).json()["worker_id"]
            except Exception as exc:
                self.errors.append(f"register: {exc!r}")
                return
            while not self.stop.is_set():
                try:
                    await self.cycle(client, worker_id)
                except Exception as exc:  # counted, and the agent goes on as a real one would
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    await asyncio.sleep(0.5)

    async def cycle(self, client: httpx.AsyncClient, worker_id: int) -> None:
        """Lease (long-poll), then answer trials for as long as each result's acknowledgement
        hands out the next lease, as the agent does."""
        t0 = time.monotonic()
        leased = await self._post(client, "/v1/leases", {"worker_id": worker_id, "wait_s": self.wait_s})
        t1 = time.monotonic()
        if leased.status_code == 204:
            self.empty_leases += 1
            return
        self.lease_ms.append((t1 - t0) * 1e3)
        held: dict[str, Any] | None = leased.json()
        while held is not None and not self.stop.is_set():
            values = objective(held["trial"]["config"])
            result = {"status": "completed", "metrics": {k: {"value": v} for k, v in values.items()},
                      "next_lease": self.next_lease}
            ack = (await self._post(client, f"/v1/leases/{held['token']}/result", result)).json()
            t2 = time.monotonic()
            self.result_ms.append((t2 - t1) * 1e3)
            self.done_at.append(t2)
            if len(self.done_at) >= self.until:
                self.stop.set()
            held, t1 = ack.get("next_lease"), t2

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
        response = await client.post(path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{path.split('/')[2]} {response.status_code}: {response.text[:200]}")
        return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token_file")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--until", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--wait-s", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-next-lease", action="store_true",
                        help="lease every trial by a long-poll instead of with the previous result")
    args = parser.parse_args()
    token = Path(args.token_file).read_text().strip()
    fleet = Fleet(args.url, token, args.workers, args.until, args.seconds, args.wait_s, not args.no_next_lease)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    Path(args.out).write_text(json.dumps(asyncio.run(fleet.run())))


if __name__ == "__main__":
    main()
