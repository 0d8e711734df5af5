"""Who leases next in a shared pool: priority classes, then weighted fair share between teams,
then between a team's studies; quotas hold a team back. Pure: the lease queue feeds it what it
knows of the pool (service.trials.shares) and leases from the studies in the order given.

A team's usage is its GPU-seconds in the pool, decayed with a half-life as Slurm's fair-share
factor decays usage, plus what its running trials will use (each counted at the pool's mean
trial time, so that leases between two refreshes of the usage do not all go one way) and its
finished trials that their study's step has not counted yet (the same). The team
whose usage per unit of weight is lowest leases next; within a team, the study whose own usage
per unit of its weight is lowest. A priority class comes before all of that: an `urgent` study
is leased before any `normal` one (it preempts nothing: it takes the next free worker), a
`batch` one only when nothing else waits.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Priority(StrEnum):
    URGENT = "urgent"
    NORMAL = "normal"
    BATCH = "batch"


RANK = {Priority.URGENT: 0, Priority.NORMAL: 1, Priority.BATCH: 2}
DAY_S = 86_400.0


@dataclass(frozen=True)
class TeamShare:
    """What the operator set for a team in a pool (no setting: weight 1, no quota)."""

    weight: float = 1.0
    max_running: int | None = None
    gpu_hours_per_day: float | None = None


@dataclass
class Usage:
    """A team's or a study's use of a pool: decayed GPU-seconds of finished trials, trials
    running now, trials finished that their study's step has not counted yet (`untold`), and
    GPU-seconds of the last 24 hours (for the daily quota)."""

    decayed_s: float = 0.0
    running: int = 0
    day_s: float = 0.0
    untold: int = 0


@dataclass(frozen=True)
class Candidate:
    """A study of the pool with trials to lease."""

    study_id: int
    team_id: int
    priority: Priority = Priority.NORMAL
    weight: float = 1.0


NO_SHARE, NO_USAGE = TeamShare(), Usage()  # read only


def decayed(gpu_seconds: float, age_s: float, half_life_s: float) -> float:
    """GPU-seconds used `age_s` ago, as they count now."""
    return gpu_seconds * math.pow(0.5, max(0.0, age_s) / half_life_s)


def held_back(team: str, pool: str, share: TeamShare, usage: Usage) -> str | None:
    """Why a team's studies wait although workers are free (its quota), or None."""
    if share.max_running is not None and usage.running >= share.max_running:
        return f"team {team} has {usage.running} trials running in pool {pool}, its limit (max_running)"
    if share.gpu_hours_per_day is not None and usage.day_s >= share.gpu_hours_per_day * 3600:
        return (f"team {team} used {usage.day_s / 3600:.2f} GPU-hours in pool {pool} in the last 24 hours, "
                f"its limit of {share.gpu_hours_per_day:g} (gpu_hours_per_day)")
    return None


def load(usage: Usage, mean_trial_s: float) -> float:
    return usage.decayed_s + (usage.running + usage.untold) * mean_trial_s


def team_load(usage: Usage, share: TeamShare, mean_trial_s: float) -> float:
    """A team's part of the order: its load per unit of its weight."""
    return load(usage, mean_trial_s) / share.weight


def study_load(usage: Usage, weight: float, mean_trial_s: float) -> float:
    """A study's part of the order within its team: its load per unit of its weight."""
    return load(usage, mean_trial_s) / weight


def order(candidates: Iterable[Candidate], shares: dict[int, TeamShare], teams: dict[int, Usage],
          studies: dict[int, Usage], mean_trial_s: float, first: int | None = None) -> list[Candidate]:
    """The studies in the order they lease: priority class, then the team's load per unit of
    weight, then the study's, then the oldest study (the caller leaves out teams `held_back`);
    only the `first` few when given (one pass, no sort of the pool's studies)."""
    team_loads: dict[int, float] = {}  # a team's part of the key, once per team

    def key(c: Candidate) -> tuple[int, float, float, int]:
        team = team_loads.get(c.team_id)
        if team is None:
            team = team_loads[c.team_id] = team_load(teams.get(c.team_id, NO_USAGE),
                                                     shares.get(c.team_id, NO_SHARE), mean_trial_s)
        return RANK[c.priority], team, study_load(studies.get(c.study_id, NO_USAGE), c.weight, mean_trial_s), c.study_id

    return sorted(candidates, key=key) if first is None else heapq.nsmallest(first, candidates, key=key)
