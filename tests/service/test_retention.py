"""Retention, on SQLite and Postgres: trials of studies finished longer ago than the setting
are deleted in batches, but for the baseline, the front and the candidates; a running study
and a study finished recently keep every trial. A study retention is done with is marked and
never read again; one whose trials another transaction holds is not marked until they are
deleted."""

from __future__ import annotations

from datetime import timedelta

from artifact_steps import completed_study, good_trials, promote
from conftest import Api
from fake_worker import result_for
from sqlalchemy import select, update

from service.store.models import Study, Trial, utcnow
from service.trials import retention


def test_old_finished_studies_keep_only_baseline_front_and_candidates(api: Api) -> None:
    old, worker = completed_study(api, trials=24)
    recent, _ = completed_study(api, trials=12)
    running = api.create_study(name="running", budget={"max_trials": 50}, parallelism=2)
    api.run_worker(worker, result_for, limit=4)
    off_front = [t for t in good_trials(api, old["id"]) if not t["on_front"]]
    member = api.token(role="member")
    assert promote(api, member, old["id"], [off_front[0]["number"]]).status_code == 201
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.write() as session:
        session.execute(update(Study).where(Study.id == old["id"]).values(finished_at=utcnow() - timedelta(days=10)))
        before = {sid: _trials(session, sid) for sid in (old["id"], recent["id"], running["id"])}
    kept = {t.number for t in before[old["id"]] if t.on_front or t.is_baseline} | {off_front[0]["number"]}
    assert len(kept) < len(before[old["id"]])  # something to delete

    with state.db.write() as session:
        assert retention.prune(session, days=7, limit=5) == 5  # one batch
    deleted = 5
    while True:
        with state.db.write() as session:
            n = retention.prune(session, days=7, limit=5)
        if n == 0:
            break
        deleted += n
    with state.db.read() as session:
        after = {sid: _trials(session, sid) for sid in before}
    assert {t.number for t in after[old["id"]]} == kept
    assert deleted == len(before[old["id"]]) - len(kept)
    assert after[recent["id"]] == before[recent["id"]] and after[running["id"]] == before[running["id"]]
    shown = api.client.get(f"/v1/studies/{old['id']}", headers=api.admin).json()
    assert shown["progress"]["completed"] == 24 and shown["front_size"] == len(
        [t for t in after[old["id"]] if t.on_front])
    assert api.client.get(f"/v1/studies/{old['id']}/candidates", headers=api.admin).json()  # still there
    with state.db.read() as session:
        marked = dict(session.execute(select(Study.id, Study.trials_pruned_at)
                                      .where(Study.id.in_(list(before)))).all())
    assert marked[old["id"]] is not None and marked[recent["id"]] is None and marked[running["id"]] is None

    # a study retention is done with is not read again: a deletable trial there now stays
    with state.db.write() as session:
        session.execute(update(Trial).where(Trial.study_id == old["id"], Trial.is_baseline.is_(False),
                                            Trial.number != off_front[0]["number"]).values(on_front=False))
        assert retention.prune(session, days=7) == 0


def test_a_study_is_marked_only_once_the_trials_another_transaction_holds_are_deleted(postgres_api: Api) -> None:
    api = postgres_api  # SQLite has one writer: nothing holds a row while retention runs there
    old, _ = completed_study(api, trials=12)
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.write() as session:
        session.execute(update(Study).where(Study.id == old["id"]).values(finished_at=utcnow() - timedelta(days=10)))
        deletable = [t.id for t in _trials(session, old["id"]) if not (t.on_front or t.is_baseline)]
    assert len(deletable) >= 2
    with state.db.write() as holder:  # another replica's transaction holds one of them
        holder.execute(select(Trial.id).where(Trial.id == deletable[0]).with_for_update())
        with state.db.write() as session:
            assert retention.prune(session, days=7) == len(deletable) - 1
        with state.db.read() as session:
            assert session.get(Study, old["id"]).trials_pruned_at is None
    with state.db.write() as session:
        assert retention.prune(session, days=7) == 1
    with state.db.read() as session:
        assert session.get(Study, old["id"]).trials_pruned_at is not None
        assert not [t for t in _trials(session, old["id"]) if not (t.on_front or t.is_baseline)]


def _trials(session, study_id: int) -> list:  # type: ignore[no-untyped-def]
    return list(session.execute(select(Trial.id, Trial.number, Trial.on_front, Trial.is_baseline)
                                .where(Trial.study_id == study_id).order_by(Trial.number)).all())
