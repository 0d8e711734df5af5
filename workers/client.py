"""HTTP client of the control plane's worker API, with retries.

Network errors, 5xx and 429 are retried with exponential backoff and full jitter (sleep a
random time in [0, min(cap, base * 2^attempt)]), so a fleet of workers does not hammer a
recovering service in lockstep. Each call retries until its deadline or until the stop
event is set; it never raises on a transient failure before that. A 409 on a lease means the
lease is gone (expired or unknown): the caller abandons its work.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TypeVar

import httpx
from pydantic import BaseModel

from wire.contract import (
    CONTRACT_HEADER,
    CONTRACT_VERSION,
    HeartbeatRequest,
    HeartbeatResponse,
    Lease,
    LeaseRequest,
    RegisterRequest,
    RegisterResponse,
    RoundProgress,
    WorkAck,
    WorkReport,
)

log = logging.getLogger(__name__)
Ack = TypeVar("Ack", bound=WorkAck)
Reply = TypeVar("Reply", bound=BaseModel)


class Backoff:
    """Exponential backoff with full jitter."""

    def __init__(
        self,
        base_s: float = 0.5,
        cap_s: float = 30.0,
        factor: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        self.base_s, self.cap_s, self.factor = base_s, cap_s, factor
        self.rng = rng or random.Random()
        self.attempt = 0

    def ceiling(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * self.factor ** min(attempt, 60))

    def next_delay(self) -> float:
        delay = self.rng.uniform(0, self.ceiling(self.attempt))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


class ApiError(Exception):
    """A response that retrying cannot fix (4xx), with the service's error code and message."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(
            f"HTTP {status} {code}: {message}" + (f" (field {field})" if field else "")
        )
        self.status, self.code, self.message, self.field = status, code, message, field


class LeaseGone(Exception):
    """409: the lease expired or is unknown; the trial will be re-run elsewhere."""


class GaveUp(Exception):
    """Retries ran out: the deadline passed or the agent is stopping."""


def _api_error(response: httpx.Response) -> ApiError:
    try:
        error = response.json().get("error", {})
        if not isinstance(error, dict):
            error = {"message": str(error)}
    except (ValueError, AttributeError):
        error = {"message": response.text[:500]}
    return ApiError(
        response.status_code,
        str(error.get("code", "http_error")),
        str(error.get("message", "")),
        error.get("field"),
    )


KEEPALIVE_EXPIRY_S = 20.0


class ControlPlaneClient:
    def __init__(
        self,
        server: str,
        token: str,
        *,
        stop: threading.Event | None = None,
        abort: threading.Event | None = None,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.server = server.rstrip("/")
        self.stop = stop or threading.Event()  # stop leasing: retries of new work give up
        self.abort = abort or threading.Event()  # give up everything, results included
        self.backoff_base_s, self.backoff_cap_s = backoff_base_s, backoff_cap_s
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.server,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "paretune-worker",
                     CONTRACT_HEADER: str(CONTRACT_VERSION)},
            timeout=timeout_s,
            # idle connections are dropped well before the server closes them (it keeps them
            # 75 s), so a request never goes out on a connection the server is closing
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )

    def close(self) -> None:
        self._http.close()

    def _request(
        self,
        path: str,
        body: BaseModel,
        *,
        deadline: float | None,
        timeout_s: float | None = None,
        until_abort: bool = False,
    ) -> httpx.Response:
        """POST with retries on network errors, 5xx and 429 until `deadline` (monotonic)."""
        backoff = Backoff(self.backoff_base_s, self.backoff_cap_s)
        payload = body.model_dump(mode="json")
        interrupt = self.abort if until_abort else self.stop
        while True:
            try:
                response = self._http.post(path, json=payload, timeout=timeout_s or self.timeout_s)
                if response.status_code < 500 and response.status_code != 429:
                    return response
                problem = f"HTTP {response.status_code}"
                retry_after = _retry_after(response)
            except httpx.HTTPError as exc:
                problem, retry_after = f"{type(exc).__name__}: {exc}", None
            delay = retry_after if retry_after is not None else backoff.next_delay()
            if deadline is not None and time.monotonic() + delay > deadline:
                raise GaveUp(f"POST {path}: {problem}; deadline reached")
            if interrupt.is_set() or self.abort.is_set():
                raise GaveUp(f"POST {path}: {problem}; stopping")
            log.warning("POST %s failed (%s); retrying in %.1f s", path, problem, delay)
            if interrupt.wait(delay) or self.abort.is_set():
                raise GaveUp(f"POST {path}: stopping")

    def pool_toolchain(self, pool: str) -> str | None:
        """The toolchain `pool` requires (GET /v1/pools), if it requires one; None also when
        the service cannot be asked now (the worker then uses its own default)."""
        try:
            response = self._http.get("/v1/pools", timeout=min(self.timeout_s, 10.0))
            rules = response.json() if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            return None
        return next((str(r["toolchain"]) for r in rules if r.get("name") == pool and r.get("toolchain")), None)

    def register(self, request: RegisterRequest) -> RegisterResponse:
        response = self._request("/v1/workers/register", request, deadline=None)
        if response.status_code not in (200, 201):
            raise _api_error(response)
        return RegisterResponse.model_validate_json(response.content)

    def lease(self, request: LeaseRequest) -> Lease | None:
        """Long-poll for a trial; None when nothing was queued in time."""
        response = self._request(
            "/v1/leases", request, deadline=None, timeout_s=request.wait_s + self.timeout_s
        )
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise _api_error(response)
        return Lease.model_validate_json(response.content)

    def heartbeat(self, token: str, phase: str | None, *, deadline: float,
                  round_s: list[float] | None = None) -> HeartbeatResponse:
        """Extend a lease, showing its phase and, for work measured in rounds, each round's seconds so far."""
        progress = RoundProgress(round_s=round_s) if round_s is not None else None
        response = self._request(
            f"/v1/leases/{token}/heartbeat",
            HeartbeatRequest(phase=phase, progress=progress),
            deadline=deadline,
            timeout_s=min(self.timeout_s, 10.0),
            until_abort=True,
        )
        return self._lease_reply(response, HeartbeatResponse)

    def post_report(self, token: str, report: WorkReport, ack: type[Ack], *, deadline: float) -> Ack:
        """Post a lease's report (of any kind of work) until acknowledged or the lease's
        deadline passes; a stop request does not interrupt it (a finished report is worth
        delivering while the agent drains), an abort does."""
        response = self._request(f"/v1/leases/{token}/result", report, deadline=deadline, until_abort=True)
        return self._lease_reply(response, ack)

    @staticmethod
    def _lease_reply(response: httpx.Response, model: type[Reply]) -> Reply:
        if response.status_code in (404, 409, 410):
            raise LeaseGone(_api_error(response).message or f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise _api_error(response)
        return model.model_validate_json(response.content)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return min(float(value), 60.0) if value is not None else None
    except ValueError:
        return None
