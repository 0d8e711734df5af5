"""A new kind of leased work needs no endpoint, no expiry loop and no agent branch: a kind
known only to this test ("audit": hash a text) is registered on both sides, over a table of
its own with the lease columns, and a real service (uvicorn, in this process) leases it to a
real agent through the same endpoints as trials. It heartbeats, reports through /result, a
malformed report is refused naming its field, an expired lease goes back to the queue and a
report sent twice is acknowledged as a duplicate."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import uvicorn
from helpers import free_port, wait_for
from pydantic import BaseModel, Field
from sqlalchemy import Column, ColumnElement, DateTime, Integer, Row, String, Table, Text, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from service.accounts import tokens as auth
from service.api.deps import AppState
from service.app import create_app
from service.config import Settings
from service.domain.machines import StateMachine
from service.store.db import Database
from service.store.migrate import upgrade
from service.store.models import LeaseColumns, queue_indexes
from service.trials.kinds import Held, Outcome, WorkKind
from wire.contract import CONTRACT_HEADER, CONTRACT_VERSION, Fingerprint, Lease, WorkAck, WorkReport
from workers.agent import jobs
from workers.agent.launch import start_agent_thread
from workers.agent.settings import AgentSettings
from workers.sandbox.context import Context

TEXTS = ["alpha", "beta", "gamma", "delta", "epsilon"]


# -- both sides' view of the kind: its work, its report, its acknowledgement --------------------


class AuditSpec(BaseModel):
    audit_id: int
    text: str
    seconds: float  # how long the worker takes (heartbeats meanwhile)


class AuditReport(WorkReport):
    digest: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")  # sha256 of the text


class AuditAck(WorkAck):
    audit_id: int


# -- the service's side: a table of its own and a WorkKind over it ---------------------------


class AuditBase(DeclarativeBase):
    pass


Table("workers", AuditBase.metadata, Column("id", Integer, primary_key=True))  # what the lease columns refer to


class AuditJob(LeaseColumns, AuditBase):
    __tablename__ = "audit_jobs"
    __table_args__ = queue_indexes("audit_jobs")

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    seconds: Mapped[float] = mapped_column(default=0.0)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


AUDITS: Table = AuditJob.__table__  # type: ignore[assignment]


class AuditState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


AUDIT_MOVES = StateMachine("audit", AuditState, AuditState.QUEUED, {
    AuditState.QUEUED: frozenset({AuditState.RUNNING}),
    AuditState.RUNNING: frozenset({AuditState.COMPLETED, AuditState.FAILED, AuditState.QUEUED}),
})


class AuditWork(WorkKind):
    name: ClassVar[str] = "audit"
    noun: ClassVar[str] = "audit"
    table = AUDITS
    report = AuditReport
    machine = AUDIT_MOVES

    def lease_columns(self) -> Sequence[ColumnElement[Any]]:
        return (AUDITS.c.id, AUDITS.c.text, AUDITS.c.seconds)

    def leased(self, session: Session, row: Row[Any]) -> AuditSpec:
        return AuditSpec(audit_id=row.id, text=row.text, seconds=row.seconds)

    def outcome(self, session: Session, lease: Held, report: AuditReport) -> Outcome:
        return Outcome(report.status, {"digest": report.digest or None, "message": report.message})

    def recorded(self, session: Session, row: Row[Any], state: str) -> AuditAck:
        return self.ack(row, state, duplicate=False)

    def ack(self, row: Row[Any], state: str, *, duplicate: bool) -> AuditAck:
        return AuditAck(audit_id=row.id, state=state, duplicate=duplicate)

    def expire_to(self, session: Session, rows: Sequence[Row[Any]]) -> list[Outcome]:
        return [Outcome("queued", {"message": None}) if row.attempt < row.max_attempts
                else Outcome("failed", {"message": "lease expired"}) for row in rows]

    def expired(self, session: Session, rows: Sequence[Row[Any]], outcomes: Sequence[Outcome]) -> None:
        pass


# -- the worker's side: a Job -------------------------------------------------------------------


class AuditJobOnWorker(jobs.Job):
    kind: ClassVar[str] = "audit"
    ack: ClassVar[type[WorkAck]] = AuditAck

    def __init__(self, lease: Lease, context: Context, fingerprint: Fingerprint | None = None) -> None:
        super().__init__(lease, context, fingerprint)
        self.spec = AuditSpec.model_validate(lease.work)

    @property
    def label(self) -> str:
        return f"audit {self.spec.audit_id}"

    def compile(self) -> None:
        pass

    def run(self) -> None:
        self.show("auditing")
        if self.cancel.wait(self.spec.seconds):
            return
        self.outcome = AuditReport(status="completed", digest=hashlib.sha256(self.spec.text.encode()).hexdigest())

    def failed(self, message: str) -> AuditReport:
        return AuditReport(status="failed", message=message)


# -- a real service with the kind registered ---------------------------------------------------------


@dataclass
class Served:
    url: str
    state: AppState
    db: Database
    worker_token: str

    def audits(self) -> dict[int, Any]:
        with self.db.read() as session:
            return {row.id: row for row in session.execute(select(AUDITS).order_by(AUDITS.c.id))}


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Served]:
    db = Database(database_url)
    upgrade(db.engine)
    AuditBase.metadata.create_all(db.engine, tables=[AUDITS])
    with db.write() as session:
        _, worker_token = auth.create_token(session, name="w", kind="worker", role="worker", team_id=None)
        session.execute(insert(AUDITS), [{"pool": "default", "backend": "python", "state": "queued", "text": text,
                                          "seconds": 2.0 if i == 1 else 0.0} for i, text in enumerate(TEXTS)])
    app = create_app(Settings(database_url=database_url, data_dir=tmp_path, lease_s=1.5, heartbeat_s=0.3,
                              reaper_interval_s=0.2))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 60, "the service to start")
    state: AppState = app.state.paretune
    state.queue.register(AuditWork())
    jobs.register(AuditJobOnWorker.kind, AuditJobOnWorker)
    try:
        yield Served(f"http://127.0.0.1:{server.config.port}", state, db, worker_token)
    finally:
        jobs.unregister(AuditJobOnWorker.kind)
        server.should_exit = True
        thread.join(30)
        db.dispose()


def _register(client: httpx.Client, kinds: list[str]) -> httpx.Response:
    return client.post("/v1/workers/register", json={"name": "by-hand", "pool": "default", "kinds": kinds,
                                                     "fingerprint": {"backends": ["python"]}})


def test_a_kind_registered_on_both_sides_runs_through_the_one_queue(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.worker_token}", CONTRACT_HEADER: str(CONTRACT_VERSION)}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
        refused = _register(client, ["audit", "census"])
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "kinds"
        assert "'census'" in refused.json()["error"]["message"]
        worker_id = _register(client, ["audit"]).json()["worker_id"]

        def lease() -> dict[str, Any]:
            r = client.post("/v1/leases", json={"worker_id": worker_id, "wait_s": 5})
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        first = lease()  # the oldest: audit 1
        assert first["kind"] == "audit" and first["work"]["text"] == TEXTS[0] and "trial" not in first
        beat = client.post(f"/v1/leases/{first['token']}/heartbeat", json={"phase": "by hand"})
        assert beat.status_code == 200 and beat.json()["cancel"] is False
        assert served.audits()[1].phase == "by hand"

        malformed = client.post(f"/v1/leases/{first['token']}/result", json={"status": "completed", "digest": "no"})
        assert malformed.status_code == 422, malformed.text
        assert malformed.json()["error"]["field"] == "digest"
        assert served.audits()[1].state == "running"  # still the worker's to report

        report = {"status": "completed", "digest": hashlib.sha256(TEXTS[0].encode()).hexdigest()}
        ack = client.post(f"/v1/leases/{first['token']}/result", json=report)
        assert ack.status_code == 200 and ack.json() == {"state": "completed", "duplicate": False, "next_lease": None,
                                                          "audit_id": 1}
        again = client.post(f"/v1/leases/{first['token']}/result", json=report)
        assert again.status_code == 200 and again.json()["duplicate"] is True
        assert client.post(f"/v1/leases/{first['token']}/heartbeat", json={}).status_code == 409

        abandoned = lease()  # audit 2, never heartbeated: its lease expires and it is queued again
        assert abandoned["work"]["audit_id"] == 2
        wait_for(lambda: served.audits()[2].state == "queued", 10, "the expired audit to be queued again")
        row = served.audits()[2]
        assert (row.attempt, row.lease_token, row.worker_id) == (1, None, None)
        late = client.post(f"/v1/leases/{abandoned['token']}/result", json=report)
        assert late.status_code == 409 and "expired" in late.json()["error"]["message"]

    # A real agent, offered audits alone, runs the rest. Audit 2 (its second attempt) takes
    # longer than a lease lives: the agent's heartbeats, showing its phase, keep it alive.
    handle = start_agent_thread(AgentSettings(server=served.url, token=served.worker_token, kinds=["audit"],
                                              max_trials=len(TEXTS) - 1, wait_s=0.5, backends=["python"],
                                              isolation="none", cache_dir=served.state.settings.data_dir / "cache"))
    wait_for(lambda: served.audits()[2].phase == "auditing", 30, "a heartbeat showing the audit's phase")
    wait_for(lambda: all(row.state == "completed" for row in served.audits().values()), 60,
             "the agent to report every audit")
    summary = handle.stop(timeout=30)
    assert summary is not None and summary.completed == len(TEXTS) - 1 and summary.error is None
    audits = served.audits()
    assert [row.digest for row in audits.values()] == [hashlib.sha256(t.encode()).hexdigest() for t in TEXTS]
    assert [row.attempt for row in audits.values()] == [1, 2, 1, 1, 1]
