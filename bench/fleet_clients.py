"""Simulated workers for bench/fleet.py: N agents speaking the real HTTP protocol from one
asyncio process, answering every trial at once with a known two-objective function.

    python bench/fleet_clients.py URL TOKEN_FILE --workers 200 --until 10000 --out result.json

Each agent registers, then leases (long-poll) and posts a result (at once, or after
`--trial-s`, as if a GPU measured meanwhile) until the service has
received `--until` results from this process (or `--seconds` pass); each result asks for the
next lease, as the agent without prefetch does (`--no-next-lease`: every trial by long-poll). Every lease and result
latency is recorded with its completion time, so the caller can compute throughput over
any window.

Each agent holds one keep-alive HTTP/1.1 connection and speaks the protocol through a small
client of its own (`Connection`): the simulated workers share this machine's cores with the
control plane. With httpx they took a quarter of this 2-core machine at 43 trials/s (about
5 ms of CPU a request); this client takes about 0.2 ms. Real workers run elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def objective(config: dict[str, Any]) -> dict[str, float]:
    x, y = float(config.get("x", 0.5)), int(config.get("y", 3))
    g = 1.0 + 9.0 * (y - 1) / 9.0
    return {"f1": x, "f2": g * (1.0 - math.sqrt(x / g))}


class Fleet:
    def __init__(self, url: str, token: str, workers: int, until: int, seconds: float, wait_s: float,
                 next_lease: bool = True, trial_s: float = 0.0) -> None:
        self.url, self.token, self.next_lease, self.trial_s = url, token, next_lease, trial_s
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
        """One worker with a connection of its own, as a real agent has."""
        async with Connection(self.url, self.token) as client:
            body = {"name": f"sim-{index}", "pool": "default",
                    "fingerprint": {"hostname": "sim", "backends": ["python"]}}
            try:
                worker_id = (await self._post(client, "/v1/workers/register", body))["worker_id"]
            except Exception as exc:
                self.errors.append(f"register: {exc!r}")
                return
            rng = random.Random(index)
            first = True
            while not self.stop.is_set():
                try:
                    await self.cycle(client, worker_id, rng, first)
                    first = False
                except Exception as exc:  # counted, and the agent goes on as a real one would
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    await asyncio.sleep(0.5)

    async def cycle(self, client: Connection, worker_id: int, rng: random.Random, first: bool) -> None:
        """Lease (long-poll), then answer trials for as long as each result's acknowledgement
        hands out the next lease, as the agent does. With `trial_s`, each trial takes between
        half and one and a half times that (trials differ, and workers fall out of step), and
        an agent's first long-poll is not counted: every agent starts at once, before the
        study's first steps have queued its trials."""
        t0 = time.monotonic()
        held = await self._post(client, "/v1/leases", {"worker_id": worker_id, "wait_s": self.wait_s})
        t1 = time.monotonic()
        if held is None:  # 204: nothing queued in time
            self.empty_leases += 1
            return
        if not (first and self.trial_s):
            self.lease_ms.append((t1 - t0) * 1e3)
        while held is not None and not self.stop.is_set():
            if self.trial_s:  # a GPU would measure meanwhile
                await asyncio.sleep(self.trial_s * rng.uniform(0.5, 1.5))
                t1 = time.monotonic()
            values = objective(held["trial"]["config"])
            result = {"status": "completed", "metrics": {k: {"value": v} for k, v in values.items()},
                      "next_lease": self.next_lease}
            ack = await self._post(client, f"/v1/leases/{held['token']}/result", result)
            assert ack is not None
            t2 = time.monotonic()
            self.result_ms.append((t2 - t1) * 1e3)
            self.done_at.append(t2)
            if len(self.done_at) >= self.until:
                self.stop.set()
            held, t1 = ack.get("next_lease"), t2

    async def _post(self, client: Connection, path: str, body: dict[str, Any]) -> Any:
        """The decoded JSON answer, None for 204; an error for 4xx and 5xx."""
        status, data = await client.post(path, body)
        if status >= 400:
            raise RuntimeError(f"{path.split('/')[2]} {status}: {data[:200]!r}")
        return json.loads(data) if data else None


class Connection:
    """One keep-alive HTTP/1.1 connection that posts JSON. A request on a reused connection
    that the server closed while idle is sent again on a new one (as HTTP clients do)."""

    def __init__(self, url: str, token: str, timeout_s: float = 120.0) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = (f"Host: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\n").encode()
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        payload = json.dumps(body).encode()
        request = (f"POST {path} HTTP/1.1\r\n".encode() + self.head
                   + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        async with asyncio.timeout(self.timeout_s):
            reused = self.writer is not None
            try:
                return await self._exchange(request)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if not reused:
                    raise
            return await self._exchange(request)  # the server had closed the idle connection

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        status_line = await self.reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length, chunked, close = 0, False, False
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        data = await self._chunked() if chunked else await self.reader.readexactly(length)
        if close:
            self.close()
        return status, data

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        parts = []
        while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)
        await self.reader.readuntil(b"\r\n")  # no trailers are sent
        return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token_file")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--until", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--wait-s", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--trial-s", type=float, default=0.0,
                        help="each trial takes this long before its result is posted (0: at once)")
    parser.add_argument("--no-next-lease", action="store_true",
                        help="lease every trial by a long-poll instead of with the previous result")
    args = parser.parse_args()
    token = Path(args.token_file).read_text().strip()
    fleet = Fleet(args.url, token, args.workers, args.until, args.seconds, args.wait_s, not args.no_next_lease,
                  args.trial_s)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    Path(args.out).write_text(json.dumps(asyncio.run(fleet.run())))


if __name__ == "__main__":
    main()
