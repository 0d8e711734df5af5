"""Who leases next in each pool, as a replica knows it: the studies with queued trials, the
operator's team settings and every team's use of the pool, read from the database off the
request path in one snapshot (`ShareView.read`: every REFRESH_S, less often where a read takes
more than READ_SHARE of that time, and at once when a study this replica has not seen queues
trials or a pool's settings change) and ordered by the policy of service.trials.fairshare on each lease.

Usage is counted where it is exact: a study's scheduling step, accounting for its finished
trials once each, adds the GPU-seconds they held their leases (lease to report) to the
study's row of `pool_usage` for that hour (`add_usage`); until it does, the view counts those
trials like running ones (a study with trials queued holds its step up to `step_hold_s`, and
they would count for nothing meanwhile). Between two refreshes the replica
counts its own leases as running at once (`claim`), and a study that queued trials leases
again at once (`queued`: its own transactions', and through the notifier a scheduler
process's or another replica's), so that the leases it hands out in that time follow the
policy too; other replicas' leases are seen at the next refresh. A team's `max_running` is
therefore exact within a replica and may be passed by the leases other replicas make within
one refresh.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Executable, Insert, bindparam, func, literal, literal_column, select, union_all
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.domain.states import STUDY_FINISHED, StudyState, TrialState
from service.store.db import Database, is_postgres
from service.store.models import (
    TRIALS,
    Pool,
    PoolTeam,
    PoolUsage,
    Study,
    Team,
    Trial,
    as_utc,
    constant,
    utcnow,
)
from service.trials import fairshare
from service.trials.fairshare import Candidate, Priority, TeamShare, Usage
from service.trials.transitions import awaiting_tell
from service.workers.registry import WorkerInfo

log = logging.getLogger("paretune.shares")

REFRESH_S = 0.5
# the largest part of a replica's time its reads of the view may take: a pool of many studies
# takes longer to read, so it is read less often, and the read's cost per second does not grow
# with the studies (a request that arrives during a read waits for the GIL)
READ_SHARE = 0.005
MAX_TRIES = 4  # studies a lease tries in the policy's order before the pool's oldest queued trial
DEFAULT_HALF_LIFE_S = 3600.0
MAX_WINDOW_S = 30 * 86_400.0  # usage older than this counts for nothing, whatever the half-life
DEFAULT_TRIAL_S = 1.0  # a pool's mean trial time before any trial of it was accounted for
SETTLE_H = 2  # hours of usage that began this many before the current one take no more use
SETTLED_S = 60.0  # how long the sums of those hours serve before they are read again


# -- usage ------------------------------------------------------------------------------------


def add_usage(session: Session, study: Study, trials: Iterable[Trial]) -> float | None:
    """Count the GPU-seconds `trials` (of `study`, just accounted for by its step) held their
    leases, from lease to report; a screened trial's screen counts now, its full stage when
    that reports. Returns how long they held them on average (None: none was leased)."""
    now = utcnow()
    hours: dict[datetime, list[float]] = defaultdict(lambda: [0.0, 0])
    for trial in trials:
        if trial.started_at is None:
            continue
        finished = as_utc(trial.finished_at) if trial.finished_at is not None else now
        bucket = hours[finished.replace(minute=0, second=0, microsecond=0)]
        bucket[0] += max(0.0, (finished - as_utc(trial.started_at)).total_seconds())
        bucket[1] += 1
    if not hours:
        return None
    session.execute(_usage_upsert(is_postgres(session)), [
        {"pool": study.pool, "study_id": study.id, "hour": hour, "team_id": study.team_id,
         "gpu_s": seconds, "trials": int(count)}
        for hour, (seconds, count) in sorted(hours.items())])
    return sum(seconds for seconds, _ in hours.values()) / sum(count for _, count in hours.values())


@functools.cache
def _usage_upsert(postgres: bool) -> Insert:
    insert = postgresql.insert(PoolUsage) if postgres else sqlite.insert(PoolUsage)
    return insert.on_conflict_do_update(
        index_elements=[PoolUsage.pool, PoolUsage.study_id, PoolUsage.hour],
        set_={"gpu_s": PoolUsage.gpu_s + insert.excluded.gpu_s, "trials": PoolUsage.trials + insert.excluded.trials})


# -- a pool as the policy sees it ---------------------------------------------------------------


@dataclass
class Entry:
    """A study of the pool, what may lease its trials, and whether it has some queued as far
    as this replica knows: from the last refresh, or its own steps since (`ShareView.queued`),
    until a lease of it finds none."""

    candidate: Candidate
    backend: str
    requires_energy: bool
    requires_gpu: bool
    queued: bool

    def fits(self, worker: WorkerInfo) -> bool:
        return (self.queued and self.backend in worker.backends and (worker.energy or not self.requires_energy)
                and (worker.gpu or not self.requires_gpu))


@dataclass
class PoolShares:
    """One pool: its studies with queued trials, its teams' settings and use."""

    name: str
    half_life_s: float = DEFAULT_HALF_LIFE_S
    shares: dict[int, TeamShare] = field(default_factory=dict)  # team id -> the operator's setting
    team_names: dict[int, str] = field(default_factory=dict)
    entries: dict[int, Entry] = field(default_factory=dict)  # study id ->
    teams: dict[int, Usage] = field(default_factory=dict)  # team id ->
    studies: dict[int, Usage] = field(default_factory=dict)  # study id ->
    mean_trial_s: float = DEFAULT_TRIAL_S
    _ranking: Ranking | None = field(default=None, init=False, repr=False)

    def share(self, team_id: int) -> TeamShare:
        return self.shares.get(team_id, fairshare.NO_SHARE)

    def held_back(self, team_id: int) -> str | None:
        return fairshare.held_back(self.team_names.get(team_id, str(team_id)), self.name, self.share(team_id),
                                   self.teams.get(team_id, fairshare.NO_USAGE))

    def order(self, worker: WorkerInfo, first: int | None = None) -> tuple[list[int], list[int]]:
        """The studies `worker` may lease from, in the policy's order (the `first` few when
        given), and those whose team's quota holds them back."""
        ranking = self._ranked()
        held = {team for team in ranking.teams() if self.held_back(team)}
        return (ranking.head(worker, held, first),
                sorted(sid for sid, e in self.entries.items() if e.candidate.team_id in held) if held else [])

    def usages(self, study_id: int, team_id: int) -> tuple[Usage, Usage]:
        """The team's and the study's use of the pool (made empty when new)."""
        return self.teams.setdefault(team_id, Usage()), self.studies.setdefault(study_id, Usage())

    def count_lease(self, study_id: int, team_id: int, delta: int) -> None:
        for usage in self.usages(study_id, team_id):
            usage.running = max(0, usage.running + delta)
        if self._ranking is not None:
            self._ranking.moved(study_id)

    def count_untold(self, study_id: int, team_id: int, count: int) -> None:
        for usage in self.usages(study_id, team_id):
            usage.untold += count
        if self._ranking is not None:
            self._ranking.moved(study_id)

    def study_load(self, study_id: int, entry: Entry) -> float:
        return fairshare.study_load(self.studies.get(study_id, fairshare.NO_USAGE), entry.candidate.weight,
                                    self.mean_trial_s)

    def _ranked(self) -> Ranking:
        """The pool's studies in order within each team, made on the first plan after a
        refresh (the refresh sets every study's usage first)."""
        if self._ranking is None:
            self._ranking = Ranking(self)
        return self._ranking


class Ranking:
    """A pool's studies kept in the policy's order within each priority class and team (by
    the study's load per unit of its weight, then its id: fairshare.order's key once the
    class and the team are set), so that a plan reads the first few studies of each team
    that fit the worker and orders those, not every study of the pool. A lease counted moves
    its study within its team's list (two bisections); the teams' loads, which every lease of
    a team changes, are read on each plan (a pool has a few teams)."""

    def __init__(self, pool: PoolShares) -> None:
        self.pool = pool
        self.lists: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)  # (class, team) ->
        self.keys: dict[int, tuple[float, int]] = {}  # study id -> its key in its list
        for study_id, entry in pool.entries.items():
            key = self.keys[study_id] = (pool.study_load(study_id, entry), study_id)
            self.lists[_group(entry)].append(key)
        for keys in self.lists.values():
            keys.sort()

    def teams(self) -> set[int]:
        return {team for _, team in self.lists}

    def moved(self, study_id: int) -> None:
        """The study's usage changed: put it in its place."""
        entry = self.pool.entries.get(study_id)
        if entry is None:
            return
        keys = self.lists[_group(entry)]
        del keys[bisect.bisect_left(keys, self.keys[study_id])]
        key = self.keys[study_id] = (self.pool.study_load(study_id, entry), study_id)
        bisect.insort(keys, key)

    def head(self, worker: WorkerInfo, held: set[int], first: int | None) -> list[int]:
        """The `first` studies (all when None) that `worker` may lease from, in the policy's
        order, leaving out the teams `held`."""
        pool, picked = self.pool, []
        for (rank, team), keys in self.lists.items():
            if team in held:
                continue
            team_load = fairshare.team_load(pool.teams.get(team, fairshare.NO_USAGE), pool.share(team),
                                            pool.mean_trial_s)
            taken = 0
            for study_load, study_id in keys:
                if pool.entries[study_id].fits(worker):
                    picked.append((rank, team_load, study_load, study_id))
                    taken += 1
                    if taken == first:
                        break
        ordered = sorted(picked) if first is None else heapq.nsmallest(first, picked)
        return [study_id for *_, study_id in ordered]


def _group(entry: Entry) -> tuple[int, int]:
    return fairshare.RANK[entry.candidate.priority], entry.candidate.team_id


@dataclass(frozen=True)
class Plan:
    """Where a lease looks, in order: `order`'s studies, then the pool's oldest queued trial
    of any study but `held`'s."""

    order: list[int]
    held: list[int]


class ShareView:
    """This replica's PoolShares of every pool, refreshed by a thread of its own."""

    def __init__(self, db: Database | None = None, refresh_s: float = REFRESH_S) -> None:
        self.db = db
        self.refresh_s = refresh_s
        self.pools: dict[str, PoolShares] = {}
        self.refreshed_at = 0.0  # time.monotonic()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._noted: set[int] | None = None  # studies that queued trials since a refresh began reading
        self.settled = SettledUsage()  # the refresh thread's alone

    # -- refresh -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.db is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fair-share", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.read()
            except Exception:
                log.exception("refreshing the pools' shares failed; retrying")
            self._wake.wait(self.interval_s(time.monotonic() - started))
            self._wake.clear()

    def interval_s(self, read_s: float) -> float:
        """How long after a read that took `read_s` the next one is due."""
        return max(self.refresh_s, read_s / READ_SHARE)

    def read(self) -> None:
        """Refresh the view now, from one snapshot of the database: a step that commits while
        the view is read shows whole or not at all, so its trials count once (finished and
        untold, or in the usage it added), never twice."""
        assert self.db is not None
        with self._lock:
            self._noted = set()  # trials queued while the database is read may be missing from it
        with self.db.snapshot() as session:
            pools = load(session, utcnow(), settled=self.settled)
        with self._lock:
            self.pools = pools
            self.refreshed_at = time.monotonic()
            noted, self._noted = self._noted, None
            self._mark_queued(noted)

    def read_soon(self) -> None:
        """Read the view now, whenever it was last read (a study it has not seen queued trials,
        or the operator changed a pool's settings)."""
        self._wake.set()

    def queued(self, study_ids: Iterable[int]) -> None:
        """These studies queued trials (after the commit: this process's, or another's
        through the notifier). A study not in the view yet is read at once."""
        with self._lock:
            if self._noted is not None:
                self._noted.update(study_ids)
            unknown = self._mark_queued(study_ids)
        if unknown:
            self.read_soon()

    def _mark_queued(self, study_ids: Iterable[int]) -> bool:
        """Whether a study is not in the view (under the lock)."""
        unknown = False
        for study_id in study_ids:
            entry = next((p.entries[study_id] for p in self.pools.values() if study_id in p.entries), None)
            if entry is None:
                unknown = True
            else:
                entry.queued = True
        return unknown

    # -- leasing ------------------------------------------------------------------------------

    def plan(self, worker: WorkerInfo) -> Plan:
        with self._lock:
            pool = self.pools.get(worker.pool)
            if pool is None:
                return Plan([], [])
            order, held = pool.order(worker, MAX_TRIES)
            return Plan(order, held)

    def claim(self, pool_name: str, study_id: int) -> bool:
        """Count a lease of `study_id` about to be tried; False: its team reached its quota
        since the plan (nothing is counted)."""
        with self._lock:
            found = self._find(pool_name, study_id)
            if found is None:
                return True
            pool, entry = found
            if pool.held_back(entry.candidate.team_id):
                return False
            pool.count_lease(study_id, entry.candidate.team_id, +1)
            return True

    def unclaim(self, pool_name: str, study_id: int) -> None:
        """The claimed lease found no trial: the study has none queued for now."""
        with self._lock:
            found = self._find(pool_name, study_id)
            if found is not None:
                found[0].count_lease(study_id, found[1].candidate.team_id, -1)
                found[1].queued = False

    def leased(self, pool_name: str, study_id: int) -> None:
        """A lease of the pool's oldest queued trial went to `study_id`."""
        with self._lock:
            found = self._find(pool_name, study_id)
            if found is not None:
                found[0].count_lease(study_id, found[1].candidate.team_id, +1)

    def _find(self, pool_name: str, study_id: int) -> tuple[PoolShares, Entry] | None:
        """The pool and the study's entry in it, if the view has them (under the lock)."""
        pool = self.pools.get(pool_name)
        entry = pool.entries.get(study_id) if pool is not None else None
        return None if pool is None or entry is None else (pool, entry)

    def reason(self, study_id: int) -> str | None:
        """Why the study's queued trials wait although it may lease (its team's quota), if so."""
        with self._lock:
            for pool in self.pools.values():
                entry = pool.entries.get(study_id)
                if entry is not None:
                    return pool.held_back(entry.candidate.team_id)
        return None


# -- reading a pool's shares --------------------------------------------------------------------


def load(session: Session, now: datetime, only: str | None = None,
         settled: SettledUsage | None = None) -> dict[str, PoolShares]:
    """Every pool with trials queued or running or with settings (or the pool `only`), as the
    database has it now; `settled`: the usage of past hours as summed at most SETTLED_S ago."""
    pools: dict[str, PoolShares] = {}

    def pool_of(name: str) -> PoolShares:
        if name not in pools:
            pools[name] = PoolShares(name)
        return pools[name]

    params = {"only": only}
    for name, half_life_s in session.execute(_pools_query(only is not None), params).all():
        pool_of(name).half_life_s = float(half_life_s)
    for name, team_id, weight, max_running, gpu_hours_per_day in session.execute(
            _teams_query(only is not None), params).all():
        pool_of(name).shares[team_id] = TeamShare(weight=float(weight), max_running=max_running,
                                                  gpu_hours_per_day=gpu_hours_per_day)
    # a row a study and state, unpacked by position: a refresh reads a row or two per study of the pool
    rows = session.execute(_queue_query(only is not None), params).all()
    for name, study_id, state, backend, requires_energy, requires_gpu, team_id, priority, weight, n in rows:
        # a study with trials running stays in the view with none queued: trials its step
        # queues later are counted at once (ShareView.queued)
        pool = pool_of(name)
        entry = pool.entries.get(study_id)
        if entry is None:
            candidate = Candidate(study_id, team_id, _priority(priority), float(weight))
            entry = pool.entries[study_id] = Entry(candidate, backend, bool(requires_energy), bool(requires_gpu),
                                                   False)
        if state == TrialState.RUNNING:
            pool.count_lease(study_id, team_id, int(n))
        elif state != TrialState.QUEUED:  # finished, not yet counted by the study's step
            pool.count_untold(study_id, team_id, int(n))
        else:  # what may lease its first queued trial
            entry.backend, entry.requires_energy, entry.requires_gpu = (backend, bool(requires_energy),
                                                                         bool(requires_gpu))
            entry.queued = True
    _add_usage(session, pools, now, only, settled)
    teams = {team for pool in pools.values() for team in (*pool.teams, *pool.shares)}
    if teams:
        names = dict(session.execute(select(Team.id, Team.name).where(Team.id.in_(sorted(teams)))).all())
        for pool in pools.values():
            pool.team_names = names
    return pools


def _add_usage(session: Session, pools: dict[str, PoolShares], now: datetime, only: str | None,
               settled: SettledUsage | None) -> None:
    """The pools' usage: one row a study and hour of `pool_usage`, over the longest window a
    pool's half-life asks for. With `settled`, the hours that take no more use are read as
    it summed them (a row a study), and only the latest hours row by row: a day of use reads
    three hours' rows, not twenty-four."""
    longest = max((p.half_life_s for p in pools.values()), default=DEFAULT_HALF_LIFE_S)
    window_start = now - timedelta(seconds=min(MAX_WINDOW_S, max(fairshare.DAY_S, 10 * longest)))
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    recent_start = window_start
    if settled is not None and only is None:
        half_lives = {name: pool.half_life_s for name, pool in pools.items()}
        recent_start = max(window_start, settled.read(session, now, window_start, half_lives))
        assert settled.at is not None
        since_summed = (now - settled.at).total_seconds()
        for summed in settled.rows:
            pool = pools.get(summed.pool) or pools.setdefault(summed.pool, PoolShares(summed.pool))
            value = fairshare.decayed(summed.decayed_s, since_summed, pool.half_life_s)
            _count(pool, totals, summed.team_id, summed.study_id, value, summed.day_s, summed.day_trials)
    hour_use: dict[tuple[datetime, float], tuple[float, bool]] = {}  # an hour's decay, once per hour and half-life
    rows = session.execute(_usage_query(only is not None, end=False), {"start": recent_start, "only": only}).all()
    for name, team_id, study_id, hour, gpu_s, trials in rows:
        pool = pools.get(name) or pools.setdefault(name, PoolShares(name))
        use = hour_use.get((hour, pool.half_life_s))
        if use is None:
            use = hour_use[(hour, pool.half_life_s)] = _hour_use(now, as_utc(hour), 1.0, pool.half_life_s)
        (factor, in_day), gpu_s = use, float(gpu_s)
        _count(pool, totals, team_id, study_id, gpu_s * factor, gpu_s if in_day else 0.0,
               int(trials) if in_day else 0)
    for name, (seconds, count) in totals.items():
        if count:
            pools[name].mean_trial_s = max(1e-3, seconds / count)


def _hour_use(now: datetime, hour: datetime, gpu_s: float, half_life_s: float) -> tuple[float, bool]:
    """(an hour's GPU-seconds as they count now, whether the hour ends within the last 24
    hours): the hour's use as if at its middle (the current hour's: halfway to now)."""
    since = (now - hour).total_seconds()  # from the hour's start
    return (fairshare.decayed(gpu_s, since / 2 if since < 3600 else since - 1800, half_life_s),
            since < fairshare.DAY_S + 3600)


def _count(pool: PoolShares, totals: dict[str, list[float]], team_id: int, study_id: int, decayed_s: float,
           day_s: float, day_trials: int) -> None:
    for usage in pool.usages(study_id, team_id):
        usage.decayed_s += decayed_s
        usage.day_s += day_s
    totals[pool.name][0] += day_s
    totals[pool.name][1] += day_trials


@functools.cache
def _usage_query(only: bool, end: bool) -> Executable:
    """`pool_usage` from hour `start` (before `end` with `end`; of pool `only` with `only`)."""
    query = (select(PoolUsage.pool, PoolUsage.team_id, PoolUsage.study_id, PoolUsage.hour, PoolUsage.gpu_s,
                    PoolUsage.trials)
             .where(PoolUsage.hour >= bindparam("start", type_=PoolUsage.hour.type)))
    if end:
        query = query.where(PoolUsage.hour < bindparam("end", type_=PoolUsage.hour.type))
    return query.where(PoolUsage.pool == bindparam("only")) if only else query


@dataclass(frozen=True)
class SettledRow:
    pool: str
    team_id: int
    study_id: int
    decayed_s: float  # as it counted at SettledUsage.at
    day_s: float  # of hours ending within the 24 hours before SettledUsage.at
    day_trials: int


@dataclass
class SettledUsage:
    """The usage of hours that take no more use, summed per study: hours that began SETTLE_H
    or more before the current one (a step counts a trial's use in the hour it finished, and
    accounts for it within moments). Summed again every SETTLED_S, when the hour turns or a
    pool's half-life changes; in between its decayed sums are decayed further by the time
    since (exact), and its last 24 hours may hold an hour that has just left them (at most
    SETTLED_S too long)."""

    at: datetime | None = None
    end: datetime | None = None  # the hours before this one are summed
    half_lives: dict[str, float] = field(default_factory=dict)
    rows: list[SettledRow] = field(default_factory=list)

    def read(self, session: Session, now: datetime, window_start: datetime, half_lives: dict[str, float]) -> datetime:
        """Sum the settled hours again if due; the start of the hours read row by row."""
        end = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=SETTLE_H)
        due = (self.at is None or end != self.end or half_lives != self.half_lives
               or (now - self.at).total_seconds() >= SETTLED_S)
        if due:
            sums: dict[tuple[str, int, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
            for pool, team_id, study_id, hour, gpu_s, trials in session.execute(
                    _usage_query(False, end=True), {"start": window_start, "end": end}).all():
                value, in_day = _hour_use(now, as_utc(hour), float(gpu_s), half_lives.get(pool, DEFAULT_HALF_LIFE_S))
                found = sums[(pool, team_id, study_id)]
                found[0] += value
                if in_day:
                    found[1] += float(gpu_s)
                    found[2] += int(trials)
            self.rows = [SettledRow(pool, team, study, decayed, day, int(trials))
                         for (pool, team, study), (decayed, day, trials) in sums.items()]
            self.at, self.end, self.half_lives = now, end, dict(half_lives)
        assert self.end is not None
        return self.end


def _priority(value: str | None) -> Priority:
    try:
        return Priority(value or Priority.NORMAL)
    except ValueError:
        return Priority.NORMAL


# the statements a refresh runs, built once (`only`: of the pool named by parameter `only`)


@functools.cache
def _pools_query(only: bool) -> Executable:
    query = select(Pool.name, Pool.usage_half_life_s)
    return query.where(Pool.name == bindparam("only")) if only else query


@functools.cache
def _teams_query(only: bool) -> Executable:
    query = select(PoolTeam.pool, PoolTeam.team_id, PoolTeam.weight, PoolTeam.max_running, PoolTeam.gpu_hours_per_day)
    return query.where(PoolTeam.pool == bindparam("only")) if only else query


@functools.cache
def _queue_query(only: bool) -> Executable:
    """The pool's studies with trials running or finished but not yet counted by their step
    (how many), or queued (what may lease the first of them), read in a time that grows with
    neither queue: running and untold trials are a few per worker, and a study's first
    queued trial is one look into its queue's index, however many it holds."""
    c = TRIALS.c
    columns = (c.pool, c.study_id, c.state, c.backend, c.requires_energy, c.requires_gpu, Study.team_id,
               Study.priority, Study.weight)
    counted = (select(*columns, func.count().label("n")).join(Study, Study.id == c.study_id).group_by(*columns))
    first = (select(c.id).where(c.study_id == Study.id, c.state == constant(TrialState.QUEUED.value))
             .order_by(c.number).limit(literal_column("1")).correlate(Study).scalar_subquery())
    queued = (select(*columns, literal(1).label("n")).select_from(Study).join(TRIALS, c.id == first)
              .where(Study.state.in_(UNFINISHED)))
    if only:
        counted, queued = counted.where(c.pool == bindparam("only")), queued.where(Study.pool == bindparam("only"))
    running = counted.where(c.state == constant(TrialState.RUNNING.value))
    return union_all(running, counted.where(awaiting_tell(c)), queued)


UNFINISHED = [state.value for state in StudyState if state not in STUDY_FINISHED]
