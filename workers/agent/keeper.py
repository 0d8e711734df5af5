"""The lease keeper: the leases an agent holds, each heartbeated with its job's phase (and
the rounds it has timed, for work measured in rounds), and the deadline of a stopping agent's
drain.

A heartbeat answered 409 (the lease is gone) or with cancel=true drops its lease: its job's
cancel event kills the job's sandbox, and nothing is reported for it. A stopping agent that
has not drained within drain_timeout_s aborts: every held job is dropped, heartbeats stop,
and the leases expire so that the service queues the work again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from wire.contract import Lease
from workers.client import ApiError, ControlPlaneClient, GaveUp, LeaseGone

log = logging.getLogger("paretune.worker")


@dataclass
class HeldLease:
    lease: Lease
    heartbeat_s: float
    lease_s: float
    phase: str = "leased"
    round_s: list[float] | None = None  # the seconds each round of its job took so far
    deadline: float = 0.0  # monotonic time the lease expires unless heartbeated
    next_beat: float = 0.0
    beating: bool = True
    cancel: threading.Event = field(default_factory=threading.Event)
    why_dropped: str = ""
    label: str = "a lease"

    def show(self, phase: str) -> None:
        self.phase = phase

    def show_rounds(self, round_s: list[float]) -> None:
        self.round_s = round_s

    def drop(self, why: str) -> None:
        if not self.cancel.is_set():
            self.why_dropped = why
            self.cancel.set()


class LeaseKeeper:
    def __init__(self, client: ControlPlaneClient, stop: threading.Event, abort: threading.Event,
                 drain_timeout_s: float) -> None:
        self.client, self.stop, self.abort = client, stop, abort
        self.drain_timeout_s = drain_timeout_s
        self.heartbeat_s, self.lease_s = 10.0, 60.0  # until the service says (registration, each lease)
        self._held: dict[str, HeldLease] = {}
        self._lock = threading.Lock()
        self._stop_seen_at: float | None = None

    def hold(self, lease: Lease) -> HeldLease:
        now = time.monotonic()
        heartbeat_s, lease_s = lease.heartbeat_s or self.heartbeat_s, lease.lease_s or self.lease_s
        held = HeldLease(lease, heartbeat_s, lease_s, deadline=now + lease_s, next_beat=now + heartbeat_s)
        with self._lock:
            self._held[lease.token] = held
        return held

    def release(self, held: HeldLease) -> None:
        with self._lock:
            self._held.pop(held.lease.token, None)

    def drop_all(self, why: str) -> None:
        with self._lock:
            for held in self._held.values():
                held.beating = False
                held.drop(why)

    def run(self, done: threading.Event) -> None:
        """The keeper thread, until `done`."""
        while not done.wait(0.2):
            try:
                self._keep()
            except Exception:
                log.exception("heartbeat loop error (continuing)")

    def _keep(self) -> None:
        now = time.monotonic()
        if self.stop.is_set() and self._stop_seen_at is None:
            self._stop_seen_at = now
            log.info("stopping: no new leases; draining held work for up to %.0f s", self.drain_timeout_s)
        drained_s = now - self._stop_seen_at if self._stop_seen_at is not None else 0.0
        if drained_s > self.drain_timeout_s and not self.abort.is_set():
            log.warning("drain timeout: killing held work, its leases will expire")
            self.stop.set()
            self.abort.set()
            self.drop_all("drain timeout")
        with self._lock:
            due = [h for h in self._held.values() if h.beating and not h.cancel.is_set() and now >= h.next_beat]
        for held in due:
            self._beat(held)

    def _beat(self, held: HeldLease) -> None:
        sent = time.monotonic()
        try:
            reply = self.client.heartbeat(held.lease.token, held.phase, deadline=sent + max(1.0, held.heartbeat_s),
                                          round_s=held.round_s)
        except LeaseGone as exc:
            held.drop(f"the lease is gone ({exc})")
            return
        except GaveUp as exc:
            log.warning("%s heartbeat failed: %s", held.label, exc)
            held.next_beat = time.monotonic() + 1.0
            return
        except ApiError as exc:
            log.error("%s heartbeat rejected: %s", held.label, exc)
            held.next_beat = time.monotonic() + held.heartbeat_s
            return
        held.deadline = sent + held.lease_s
        held.next_beat = sent + held.heartbeat_s
        if reply.cancel:
            held.drop("the service cancelled it (its study was cancelled)")
