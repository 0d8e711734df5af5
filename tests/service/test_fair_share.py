"""Fair-share leasing through the service, on SQLite and Postgres: the teams' weights decide
who leases next, a priority class comes first, quotas hold a team back with the reason on its
study, the usage the step counts is the trials' lease time, and past use decays.

Expected lease counts are worked out by hand from the policy (service.trials.fairshare):
with no trial finished yet, a team's load is its running trials, and the lower load per unit
of weight leases next (ties: the older study)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from conftest import Api, make_api, study_doc
from sqlalchemy import func, select, update

from service.store.models import PoolUsage, Study, Trial, utcnow
from service.trials import shares

RESULT = {"status": "completed", "metrics": {"f1": {"value": 1.0}, "f2": {"value": 2.0}}}


def team_study(api: Api, team: str, name: str, **changes: Any) -> tuple[str, int]:
    token = api.token(role="admin", team=team)
    body = {**_doc(name), **changes}
    r = api.client.post("/v1/studies", json=body, headers=api.headers(token))
    assert r.status_code == 201, r.text
    return token, int(r.json()["id"])


def _doc(name: str) -> dict[str, Any]:
    return study_doc(name=name, budget={"max_trials": 200}, parallelism=24, sampler={"name": "random", "seed": 1})


def refresh(api: Api) -> None:
    """The replica's view of the pools read now, and only when asked: the expected counts
    assume no refresh between two leases (one could read a lease not yet committed)."""
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.shares.stop()
    state.shares.read()


def leases(api: Api, worker: tuple[dict[str, str], int], n: int) -> list[dict[str, Any]]:
    got = []
    for _ in range(n):
        lease = api.lease(worker)
        assert lease is not None
        got.append(lease)
    return got


def by_study(got: list[dict[str, Any]]) -> Counter[int]:
    return Counter(int(lease["trial"]["study_id"]) for lease in got)


def report_those_of(study_id: int, api: Api, worker: tuple[dict[str, str], int], got: list[dict[str, Any]]) -> None:
    for lease in got:
        if int(lease["trial"]["study_id"]) == study_id:
            assert api.post_result(worker, lease["token"], RESULT).status_code == 200


def test_equal_weights_alternate_and_weights_three_to_one(api: Api) -> None:
    _, a = team_study(api, "a", "a sweep")
    _, b = team_study(api, "b", "b tune")
    api.quiesce()
    refresh(api)
    worker = api.worker()
    assert by_study(leases(api, worker, 12)) == {a: 6, b: 6}

    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"weight": 3}, "b": {"weight": 1}}},
                       headers=api.admin)
    assert r.status_code == 200, r.text
    assert {t["team"]: t["weight"] for t in r.json()["teams"]} == {"a": 3.0, "b": 1.0}
    # 6 running each: a's load per unit of weight is 6/3, b's 6/1. a leases until it has 18
    # running (18/3 = 6); the tie goes to the study with less load of its own (b: 7); then a
    # again until 21 (7.0), and so on
    refresh(api)
    assert by_study(leases(api, worker, 16)) == {a: 15, b: 1}


def test_trials_queued_by_another_process_are_leased_by_the_policy(api: Api) -> None:
    """The replica's view has a study lease until a lease of it finds nothing, so trials its
    step queued elsewhere since the view was read (a scheduler process's) are leased by fair
    share, not left to the pool's oldest-first order."""
    _, a = team_study(api, "a", "a sweep")  # older: first in the pool's own order
    _, b = team_study(api, "b", "b tune", parallelism=2)
    api.quiesce()
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.db.send_effects_to(state.notifier, state.scheduler, None)  # its steps queue unseen by the view
    refresh(api)
    worker = api.worker()
    first = leases(api, worker, 4)
    assert by_study(first) == {a: 2, b: 2}
    report_those_of(b, api, worker, first)
    api.quiesce()  # b's step queues two more; the view counts 2 running for each team
    assert by_study(leases(api, worker, 4)) == {a: 2, b: 2}


def test_a_study_that_ran_out_leases_again_once_another_process_queues_its_trials(api: Api) -> None:
    """A lease of a study that found none takes it out of the replica's order until it has
    trials again: trials another process queued (a scheduler process's step) put it back at
    once, through their `queued:` notification, not at the next refresh."""
    _, a = team_study(api, "a", "a sweep")
    _, b = team_study(api, "b", "b tune", parallelism=2)
    api.quiesce()
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.db.send_effects_to(state.notifier, state.scheduler, None)  # as in a scheduler process
    refresh(api)
    worker = api.worker()
    first = leases(api, worker, 4)
    assert by_study(first) == {a: 2, b: 2}
    # a's turn, then b's: b has none left, so its lease goes to a's queue and b leaves the order
    assert by_study(leases(api, worker, 2)) == {a: 2}
    entry = state.shares.pools["default"].entries[b]
    assert not entry.queued
    report_those_of(b, api, worker, first)
    api.quiesce()  # b's step queues two more
    deadline = time.monotonic() + 5
    while not entry.queued and time.monotonic() < deadline:  # the notification crosses the event loop
        time.sleep(0.01)
    assert entry.queued
    assert by_study(leases(api, worker, 2)) == {b: 2}  # 2 running by the view's count, against a's 4


class NoSteps:
    """Wake-ups that step nothing: a result's trial stays untold until the test steps it."""

    def wake(self, *study_ids: int, urgent: bool = False) -> None:
        pass


@pytest.fixture
def unstepped_api(database_url: str) -> Iterator[Api]:
    yield from make_api(database_url, schedule_interval_s=600)  # its scheduler looks for work once


def test_finished_trials_count_as_use_until_their_step_counts_them(unstepped_api: Api) -> None:
    """A trial that finished is in neither the running trials nor the usage its study's step
    counts until that step runs (a study with a deep queue holds its step up to
    step_hold_s): meanwhile it counts like a running one."""
    api = unstepped_api
    _, b = team_study(api, "b", "b tune")  # older: wins a tie
    _, a = team_study(api, "a", "a sweep")
    api.quiesce()
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.db.send_effects_to(state.notifier, NoSteps(), state.shares)
    refresh(api)
    worker = api.worker()
    first = leases(api, worker, 4)
    assert by_study(first) == {a: 2, b: 2}
    report_those_of(a, api, worker, first)
    refresh(api)
    with state.db.read() as session:
        team_a = session.get(Study, a).team_id
    usage = state.shares.pools["default"].teams[team_a]
    assert (usage.running, usage.untold, usage.decayed_s) == (0, 2, 0.0)
    # a's two finished trials weigh as b's two running ones: the tie goes to the older study
    assert by_study(leases(api, worker, 1)) == {b: 1}
    api.quiesce()  # a's step counts them
    refresh(api)
    usage = state.shares.pools["default"].teams[team_a]
    assert (usage.running, usage.untold) == (0, 0) and usage.decayed_s > 0


def test_a_step_that_commits_while_the_view_is_read_counts_its_trials_once(
        unstepped_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The view reads the queue (finished trials no step has counted) and then the usage the
    steps counted. A step that commits between the two reads must not show in the second
    only: its trials would count twice, untold and used (a held step counts seconds of
    results at once, and the study's team would lose its share for a refresh)."""
    api = unstepped_api
    _, a = team_study(api, "a", "a sweep")
    api.quiesce()
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.db.send_effects_to(state.notifier, NoSteps(), state.shares)
    worker = api.worker()
    report_those_of(a, api, worker, leases(api, worker, 3))
    read_usage = shares._add_usage

    def step_in_between(*args: Any) -> None:
        api.quiesce()  # a's step counts the three, and commits
        read_usage(*args)

    monkeypatch.setattr(shares, "_add_usage", step_in_between)
    refresh(api)
    with state.db.read() as session:
        team_a = session.get(Study, a).team_id
        assert session.query(Trial).filter_by(study_id=a, told=False, state="completed").count() == 0
    usage = state.shares.pools["default"].teams[team_a]
    assert (usage.untold, usage.decayed_s) == (3, 0.0)  # as it was when the read began
    monkeypatch.setattr(shares, "_add_usage", read_usage)
    refresh(api)
    usage = state.shares.pools["default"].teams[team_a]
    assert usage.untold == 0 and usage.decayed_s > 0


def test_urgent_leases_first_and_batch_last(api: Api) -> None:
    _, normal = team_study(api, "a", "normal")
    _, batch = team_study(api, "b", "batch", priority="batch")
    token_b, urgent = team_study(api, "b", "urgent", priority="urgent", parallelism=3)
    api.quiesce()
    refresh(api)
    worker = api.worker()
    got = [int(lease["trial"]["study_id"]) for lease in leases(api, worker, 30)]
    assert got[:3] == [urgent] * 3  # its three queued trials, before anything else
    assert batch not in got[3:27] and got[3:27] == [normal] * 24  # normal's 24 before any batch trial
    assert got[27:] == [batch] * 3
    assert api.client.get(f"/v1/studies/{urgent}", headers=api.headers(token_b)).json()["priority"] == "urgent"


def test_max_running_holds_a_team_back_with_its_reason(api: Api) -> None:
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"max_running": 2}}}, headers=api.admin)
    assert r.status_code == 422  # team a does not exist yet
    token, a = team_study(api, "a", "a sweep")
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"max_running": 2}}}, headers=api.admin)
    assert r.status_code == 200, r.text
    api.quiesce()
    refresh(api)
    worker = api.worker()
    held = leases(api, worker, 2)
    assert api.lease(worker) is None  # 22 queued, none leased: the quota
    study = api.client.get(f"/v1/studies/{a}", headers=api.headers(token)).json()
    assert "max_running" in study["queued_reason"] and "team a" in study["queued_reason"]
    shares_out = api.client.get("/v1/pools/default/shares", headers=api.headers(token)).json()
    assert [(t["team"], t["running"], t["max_running"]) for t in shares_out["teams"]] == [("a", 2, 2)]
    assert "max_running" in shares_out["teams"][0]["held_back"]

    assert api.post_result(worker, held[0]["token"], RESULT).status_code == 200
    refresh(api)
    assert api.lease(worker) is not None  # one finished: one more may run
    assert api.lease(worker) is None


def test_daily_gpu_hours_hold_a_team_back_once_its_step_counts_them(api: Api) -> None:
    token, a = team_study(api, "a", "a sweep", parallelism=4)
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"gpu_hours_per_day": 0.0002}}},  # 0.72 s
                       headers=api.admin)
    assert r.status_code == 200, r.text
    api.quiesce()
    refresh(api)
    worker = api.worker()
    for lease in leases(api, worker, 2):
        time.sleep(0.45)
        assert api.post_result(worker, lease["token"], RESULT).status_code == 200
    api.quiesce()  # the step accounts for both and counts their lease time
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    with state.db.read() as session:
        used = session.execute(select(func.sum(PoolUsage.gpu_s), func.sum(PoolUsage.trials))).one()
        rows = session.execute(select(Trial.started_at, Trial.finished_at)
                               .where(Trial.study_id == a, Trial.finished_at.is_not(None))).all()
    assert used[1] == 2
    assert used[0] == pytest.approx(sum((f - s).total_seconds() for s, f in rows), abs=1e-3)
    assert used[0] >= 0.9
    refresh(api)
    assert api.lease(worker) is None
    reason = api.client.get(f"/v1/studies/{a}", headers=api.headers(token)).json()["queued_reason"]
    assert "gpu_hours_per_day" in reason


def test_past_use_decays_by_the_pools_half_life(api: Api) -> None:
    token, a = team_study(api, "a", "a sweep")
    r = api.client.put("/v1/pools/default", json={"usage_half_life_s": 3600, "teams": {}}, headers=api.admin)
    assert r.status_code == 200, r.text
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    now = utcnow()
    hour = now.replace(minute=0, second=0, microsecond=0)
    with state.db.write() as session:
        assert session.execute(select(func.count()).select_from(PoolUsage)).scalar() == 0
        team_id = session.get(Study, a).team_id
        session.add_all([
            PoolUsage(pool="default", study_id=a, hour=hour - timedelta(hours=3), team_id=team_id, gpu_s=7200.0,
                      trials=10),
            PoolUsage(pool="default", study_id=a, hour=hour - timedelta(hours=30), team_id=team_id, gpu_s=3600.0,
                      trials=5)])
    with state.db.read() as session:
        pool = shares.load(session, now)["default"]
    # the row of three hours ago counts as used at its middle, 2.5 h and the minutes of this
    # hour ago: halved 2.5 times and more; the row of 30 hours ago is outside the last day
    age = (now - (hour - timedelta(hours=3))).total_seconds() - 1800
    age_old = (now - (hour - timedelta(hours=30))).total_seconds() - 1800
    expected = 7200.0 * 0.5 ** (age / 3600) + 3600.0 * 0.5 ** (age_old / 3600)
    assert pool.teams[team_id].decayed_s == pytest.approx(expected, rel=1e-6)
    assert pool.teams[team_id].day_s == pytest.approx(7200.0)
    assert pool.mean_trial_s == pytest.approx(720.0)
    out = api.client.get("/v1/pools/default/shares", headers=api.headers(token)).json()
    assert out["teams"][0]["usage_gpu_hours"] == pytest.approx(expected / 3600, rel=1e-4)
    assert out["teams"][0]["gpu_hours_24h"] == pytest.approx(2.0)


def test_settled_hours_are_summed_once_and_give_what_a_full_read_gives(api: Api) -> None:
    """The refresh reads the hours that take no more use as it summed them (a row a study),
    and the latest hours row by row: the same usage as reading every row, now and 30 s later
    (decayed further), with a new row of a recent hour seen at once and one of a settled hour
    at the next summing."""
    studies = [team_study(api, team, f"{team} {i}")[1] for team in ("a", "b") for i in range(2)]
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    hour = utcnow().replace(minute=0, second=0, microsecond=0)
    now = hour + timedelta(minutes=30)  # no hour crosses the last day's edge in the next minute
    with state.db.write() as session:
        team_of = {sid: session.get(Study, sid).team_id for sid in studies}
        session.add_all([PoolUsage(pool="default", study_id=sid, hour=hour - timedelta(hours=h), team_id=team_of[sid],
                                   gpu_s=100.0 * (1 + h) + sid, trials=1 + h % 3)
                         for sid in studies for h in range(30)])
    settled = shares.SettledUsage()

    def both(at: Any) -> tuple[shares.PoolShares, shares.PoolShares]:
        with state.db.read() as session:
            return shares.load(session, at)["default"], shares.load(session, at, settled=settled)["default"]

    def same(full: shares.PoolShares, cached: shares.PoolShares) -> None:
        for kind in ("teams", "studies"):
            wanted, got = getattr(full, kind), getattr(cached, kind)
            assert wanted.keys() == got.keys()
            for key, usage in wanted.items():
                assert got[key].decayed_s == pytest.approx(usage.decayed_s, rel=1e-9)
                assert got[key].day_s == pytest.approx(usage.day_s, rel=1e-9)
        assert cached.mean_trial_s == pytest.approx(full.mean_trial_s, rel=1e-9)

    same(*both(now))
    assert len(settled.rows) == len(studies)  # 28 settled hours of each study, one row each
    summed_at = settled.at
    same(*both(now + timedelta(seconds=30)))
    assert settled.at == summed_at  # not summed again
    with state.db.write() as session:  # a recent hour's use, and a late one of a settled hour
        session.execute(update(PoolUsage).where(PoolUsage.study_id == studies[0], PoolUsage.hour == hour)
                        .values(gpu_s=PoolUsage.gpu_s + 5000.0))
        session.execute(update(PoolUsage).where(PoolUsage.study_id == studies[1],
                                                PoolUsage.hour == hour - timedelta(hours=5))
                        .values(gpu_s=PoolUsage.gpu_s + 9000.0))
    full, cached = both(now + timedelta(seconds=40))
    assert cached.studies[studies[0]].day_s == pytest.approx(full.studies[studies[0]].day_s)
    assert cached.studies[studies[1]].day_s == pytest.approx(full.studies[studies[1]].day_s - 9000.0)
    same(*both(now + timedelta(seconds=40 + shares.SETTLED_S)))  # summed again
    assert settled.at == now + timedelta(seconds=40 + shares.SETTLED_S)


def test_pool_settings_are_checked_and_shown_to_each_team(api: Api) -> None:
    token_a, _ = team_study(api, "a", "a sweep")
    token_b, _ = team_study(api, "b", "b sweep")
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"weight": 0, "max_running": -1},
                                                            "nobody": {}, "else": {}}}, headers=api.admin)
    assert r.status_code == 422
    fields = {e["field"] for e in r.json()["error"]["errors"]}
    assert {"teams.a.weight", "teams.a.max_running"} <= fields
    r = api.client.put("/v1/pools/default", json={"teams": {"nobody": {}, "else": {}}}, headers=api.admin)
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["error"]["errors"]] == ["teams.else", "teams.nobody"]
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"weight": 2}}}, headers=api.headers(token_a))
    assert r.status_code == 403
    r = api.client.put("/v1/pools/default", json={"teams": {"a": {"weight": 2, "allow_urgent": False},
                                                            "b": {"max_running": 5}}}, headers=api.admin)
    assert r.status_code == 200, r.text
    seen = api.client.get("/v1/pools", headers=api.headers(token_b)).json()
    assert [(t["team"], t["max_running"]) for t in seen[0]["teams"]] == [("b", 5)]
    assert len(api.client.get("/v1/pools", headers=api.admin).json()[0]["teams"]) == 2
    r = api.client.post("/v1/studies", json={**_doc("urgent"), "priority": "urgent"}, headers=api.headers(token_a))
    assert r.status_code == 403 and r.json()["error"]["field"] == "priority"
    r = api.client.post("/v1/studies", json={**_doc("odd"), "priority": "soon", "weight": 0},
                        headers=api.headers(token_b))
    assert r.status_code == 422
    assert {e["field"] for e in r.json()["error"]["errors"]} >= {"priority", "weight"}


def test_a_view_that_takes_long_to_read_is_read_less_often_but_at_once_for_a_new_study(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool of many studies takes longer to read: the refresh waits in proportion, so that
    reading the view takes at most READ_SHARE of the replica's time; a study the view has not
    seen is still read at once."""
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.shares.stop()
    read_s, reads = 0.02, []
    load = shares.load

    def slow_load(*args: Any, **kwargs: Any) -> dict[str, shares.PoolShares]:
        reads.append(time.monotonic())
        time.sleep(read_s)
        return load(*args, **kwargs)

    monkeypatch.setattr(shares, "load", slow_load)
    view = shares.ShareView(state.db, refresh_s=0.01)
    assert view.interval_s(read_s) == pytest.approx(read_s / shares.READ_SHARE)
    view.start()
    try:
        time.sleep(1.0)
        assert len(reads) == 1  # at refresh_s alone it would have read about 30 times
        view.queued([10**9])  # a study it has not seen
        deadline = time.monotonic() + 2
        while len(reads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reads) == 2 and reads[1] - reads[0] < 1.5
    finally:
        view.stop()


def test_a_pools_new_settings_are_read_at_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """However long the view waits between reads, the operator's change of a pool's settings
    has every replica read it at once (through the notifier, once it commits)."""
    token, a = team_study(api, "a", "a sweep")
    api.quiesce()
    state = api.client.app.state.paretune  # type: ignore[attr-defined]
    state.shares.stop()
    state.shares = view = shares.ShareView(state.db, refresh_s=600)
    view.start()
    try:
        time.sleep(0.5)  # its first read
        assert view.reason(a) is None
        r = api.client.put("/v1/pools/default", json={"teams": {"a": {"max_running": 0}}}, headers=api.admin)
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 5
        while view.reason(a) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "max_running" in (view.reason(a) or "")
        study = api.client.get(f"/v1/studies/{a}", headers=api.headers(token)).json()
        assert "max_running" in study["queued_reason"]
    finally:
        view.stop()
