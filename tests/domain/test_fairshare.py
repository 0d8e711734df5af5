"""The lease order of a shared pool, against hand-computed cases and a simulated fleet."""

from __future__ import annotations

import heapq
import random

import pytest

from service.trials.fairshare import Candidate, Priority, TeamShare, Usage, decayed, held_back, order
from service.trials.shares import Entry, PoolShares
from service.workers.registry import WorkerInfo

A, B, C = 1, 2, 3  # team ids


def ids(candidates: list[Candidate]) -> list[int]:
    return [c.study_id for c in candidates]


def test_the_team_that_used_less_per_unit_of_weight_leases_first() -> None:
    studies = [Candidate(10, A), Candidate(20, B)]
    # A: 10 GPU-s decayed + 2 running x 1 s = 12; B: nothing yet
    teams = {A: Usage(decayed_s=10, running=2), B: Usage()}
    assert ids(order(studies, {}, teams, {}, mean_trial_s=1.0)) == [20, 10]
    # B with 12 running is level with A (12 = 12): the older study first
    teams[B] = Usage(running=12)
    assert ids(order(studies, {}, teams, {}, mean_trial_s=1.0)) == [10, 20]
    # A weight 3: 12 / 3 = 4 against B's 12 / 1
    shares = {A: TeamShare(weight=3)}
    assert ids(order(studies, shares, teams, {}, mean_trial_s=1.0)) == [10, 20]
    teams[B] = Usage(decayed_s=3.5)
    assert ids(order(studies, shares, teams, {}, mean_trial_s=1.0)) == [20, 10]


def test_within_a_team_by_each_studys_usage_per_unit_of_its_weight() -> None:
    studies = [Candidate(10, A, weight=1), Candidate(11, A, weight=4), Candidate(20, B)]
    teams = {A: Usage(decayed_s=1), B: Usage(decayed_s=5)}
    per_study = {10: Usage(decayed_s=0.5), 11: Usage(decayed_s=0.5, running=1)}  # 0.5 / 1 against 1.5 / 4
    assert ids(order(studies, {}, teams, per_study, mean_trial_s=1.0)) == [11, 10, 20]


def test_a_priority_class_comes_before_every_share() -> None:
    studies = [Candidate(10, A, Priority.BATCH), Candidate(11, A, Priority.URGENT), Candidate(20, B),
               Candidate(30, C, Priority.NORMAL)]
    teams = {A: Usage(decayed_s=1000), B: Usage(decayed_s=10), C: Usage()}
    assert ids(order(studies, {}, teams, {}, mean_trial_s=1.0)) == [11, 30, 20, 10]


@pytest.mark.parametrize("seed", range(20))
def test_the_first_few_are_the_head_of_the_whole_order(seed: int) -> None:
    """A lease asks for the first few studies only (one pass, no sort): they must be the head
    of the order the policy defines, keyed here by hand, ties included."""
    rng = random.Random(seed)
    teams = {t: Usage(decayed_s=rng.choice([0, 5, 10.5]), running=rng.randrange(3)) for t in (A, B, C)}
    shares = {t: TeamShare(weight=rng.choice([1, 2, 3])) for t in (A, B) if rng.random() < 0.7}
    studies = [Candidate(s, rng.choice((A, B, C)), rng.choice(list(Priority)), rng.choice([1.0, 2.0]))
               for s in rng.sample(range(1000), rng.randrange(1, 60))]
    per_study = {c.study_id: Usage(decayed_s=rng.choice([0, 1, 2.5]), running=rng.randrange(2))
                 for c in studies if rng.random() < 0.8}
    rank = {Priority.URGENT: 0, Priority.NORMAL: 1, Priority.BATCH: 2}

    def by_hand(c: Candidate) -> tuple[int, float, float, int]:
        team, study = teams[c.team_id], per_study.get(c.study_id, Usage())
        weight = shares[c.team_id].weight if c.team_id in shares else 1.0
        return (rank[c.priority], (team.decayed_s + team.running * 0.7) / weight,
                (study.decayed_s + study.running * 0.7) / c.weight, c.study_id)

    expected = ids(sorted(studies, key=by_hand))
    assert ids(order(studies, shares, teams, per_study, mean_trial_s=0.7)) == expected
    for first in (1, 4, len(studies) + 3):
        assert ids(order(studies, shares, teams, per_study, mean_trial_s=0.7, first=first)) == expected[:first]


@pytest.mark.parametrize("seed", range(10))
def test_a_pools_plan_follows_the_order_as_leases_come_and_go(seed: int) -> None:
    """A pool keeps its studies ranked within each team and moves a study as its leases are
    counted (shares.Ranking): after each of a few hundred leases, ends, quota changes and
    studies that find their queue empty, its plan must be the head of the whole order
    computed anew from the same usage."""
    rng = random.Random(seed)
    pool = PoolShares("gpu", mean_trial_s=rng.choice([0.3, 1.0]))
    for team in (A, B, C):
        pool.shares[team] = TeamShare(weight=rng.choice([1, 2, 3]), max_running=rng.choice([None, 6, 40]))
        pool.teams[team] = Usage(decayed_s=rng.choice([0, 5, 10.5]))
    for study in rng.sample(range(1000), rng.randrange(1, 80)):
        candidate = Candidate(study, rng.choice((A, B, C)), rng.choice(list(Priority)), rng.choice([1.0, 2.0]))
        pool.entries[study] = Entry(candidate, rng.choice(["triton", "cuda"]), rng.random() < 0.2, True, True)
        pool.studies[study] = Usage(decayed_s=rng.choice([0, 1, 2.5]))
    workers = [WorkerInfo(1, 1, "gpu", ("triton",), False, {"gpu": True}),
               WorkerInfo(2, 1, "gpu", ("triton", "cuda"), True, {"gpu": True})]
    for _ in range(300):
        worker = rng.choice(workers)
        first = rng.choice([1, 4, None])
        held = {t for t in (A, B, C) if pool.held_back(t)}
        fits = [e.candidate for e in pool.entries.values() if e.candidate.team_id not in held and e.fits(worker)]
        expected = ids(order(fits, pool.shares, pool.teams, pool.studies, pool.mean_trial_s, first))
        assert pool.order(worker, first)[0] == expected
        study = rng.choice(list(pool.entries))
        team = pool.entries[study].candidate.team_id
        move = rng.random()
        if move < 0.6:
            pool.count_lease(study, team, +1)
        elif move < 0.85:
            pool.count_lease(study, team, -1)
        elif move < 0.95:
            pool.entries[study].queued = not pool.entries[study].queued
        else:
            pool.count_untold(study, team, 1)


def test_usage_halves_every_half_life() -> None:
    assert decayed(100, 0, 3600) == 100
    assert decayed(100, 3600, 3600) == pytest.approx(50)
    assert decayed(100, 7200, 3600) == pytest.approx(25)
    assert decayed(100, -5, 3600) == 100  # a clock a little behind counts nothing as future


def test_quotas_hold_a_team_back_with_the_reason() -> None:
    share = TeamShare(max_running=4, gpu_hours_per_day=2)
    assert held_back("ml", "h200", share, Usage(running=3, day_s=7199)) is None
    assert held_back("ml", "h200", share, Usage(running=4)) == (
        "team ml has 4 trials running in pool h200, its limit (max_running)")
    assert "used 2.00 GPU-hours in pool h200 in the last 24 hours, its limit of 2 (gpu_hours_per_day)" in str(
        held_back("ml", "h200", share, Usage(day_s=7200)))
    assert held_back("ml", "h200", TeamShare(), Usage(running=10_000, day_s=1e9)) is None


def simulate(weights: dict[int, float], b_parallelism: int, head_start_s: float, b_trials: int,
             workers: int = 16, seed: int = 0) -> float:
    """B's share of the leases while it has trials to lease, in a fleet of `workers` whose
    trials take 0.2-0.4 s; team A's study always has trials queued and started `head_start_s`
    before B's. Usage is exact (what the lease queue reads, without its refresh delay)."""
    rng = random.Random(seed)
    shares = {team: TeamShare(weight=w) for team, w in weights.items()}
    usage = {A: Usage(), B: Usage()}
    free_at = [(0.0, w) for w in range(workers)]
    heapq.heapify(free_at)
    running: list[tuple[float, int, float]] = []  # (end, team, duration)
    b_left, leases = b_trials, []
    while b_left:
        now, worker = heapq.heappop(free_at)
        while running and running[0][0] <= now:
            _, team, duration = heapq.heappop(running)
            usage[team].running -= 1
            usage[team].decayed_s += duration
        candidates = [Candidate(1, A)]
        if now >= head_start_s and usage[B].running < b_parallelism:
            candidates.append(Candidate(2, B))
        chosen = order(candidates, shares, usage, {}, mean_trial_s=0.3)[0]
        duration = rng.uniform(0.2, 0.4)
        usage[chosen.team_id].running += 1
        heapq.heappush(running, (now + duration, chosen.team_id, duration))
        heapq.heappush(free_at, (now + duration, worker))
        if now >= head_start_s:
            leases.append(chosen.team_id)
            b_left -= chosen.team_id == B
    return leases.count(B) / len(leases)


def test_a_simulated_fleet_shares_by_weight() -> None:
    # equal weights: B takes every worker its parallelism of 8 allows, half of 16
    assert simulate({A: 1, B: 1}, b_parallelism=8, head_start_s=3, b_trials=400) == pytest.approx(0.5, abs=0.05)
    # 3:1 for A: B a quarter, after catching up A's head start
    assert simulate({A: 3, B: 1}, b_parallelism=8, head_start_s=3, b_trials=400) == pytest.approx(0.25, abs=0.05)
    # first in, first out would give B nothing while A's backlog lasts; here B's parallelism bounds it
    assert simulate({A: 1, B: 1}, b_parallelism=2, head_start_s=3, b_trials=200) == pytest.approx(2 / 16, abs=0.03)
