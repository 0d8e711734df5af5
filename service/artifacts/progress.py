"""Rounds done and left of a validation, and when it should be done. No I/O.

A worker reports, in its lease's heartbeats, the seconds each round of its job took so far
(wire.RoundProgress); the service stamps the time the count last grew. A running job's time
left is its rounds left times its own mean round, counted from that stamp; a job with no
round timed yet uses the mean round of the whole validation, counted from now, and so does
a queued job, as if a worker took it at once (the rounds were split over the pool's live
workers, so the jobs run side by side). The validation is done when its last job is: its
ETA is the latest of its jobs' ends. Before any round was timed there is no ETA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import fmean

from pydantic import BaseModel, Field

from service.api.schemas import Utc
from service.artifacts.states import JOB_FINISHED, JobState
from service.store.models import ValidationJob, as_utc


class ValidationProgress(BaseModel):
    rounds: int = Field(description="rounds planned, over all its jobs")
    done: int = Field(description="rounds measured so far")
    left: int = Field(description="rounds still to measure; 0 once every job has finished (a failed job's "
                                  "rounds not measured are dropped, not left)")
    round_s: float | None = Field(description="mean seconds of a round so far, over every job's timed rounds")
    eta_at: Utc | None = Field(description="when its last job should finish; null before any round was timed "
                                           "and once every job has finished")
    eta_s: float | None = Field(description="seconds from now to eta_at (0 when overdue)")


@dataclass(frozen=True)
class JobRounds:
    """What a job's progress is computed from."""

    state: str
    rounds: int
    done: int
    round_s: Sequence[float]
    progress_at: datetime | None

    @classmethod
    def of(cls, job: ValidationJob) -> JobRounds:
        """A queued job has nothing done: what an expired lease measured is measured again."""
        if job.state == JobState.QUEUED:
            return cls(job.state, job.rounds, 0, (), None)
        at = as_utc(job.progress_at) if job.progress_at is not None else None
        return cls(job.state, job.rounds, job.rounds_done, [float(s) for s in job.round_s or []], at)

    @property
    def finished(self) -> bool:
        return JobState(self.state) in JOB_FINISHED

    def end(self, mean_round_s: float, now: datetime) -> datetime:
        """When it should finish (it has not yet)."""
        own = fmean(self.round_s) if self.round_s else mean_round_s
        start = self.progress_at if self.round_s and self.progress_at is not None else now
        return start + timedelta(seconds=(self.rounds - self.done) * own)


def of_jobs(jobs: Sequence[ValidationJob], now: datetime) -> ValidationProgress:
    return progress([JobRounds.of(job) for job in jobs], now)


def progress(jobs: Sequence[JobRounds], now: datetime) -> ValidationProgress:
    timed = [s for job in jobs for s in job.round_s]
    mean = fmean(timed) if timed else None
    running = [job for job in jobs if not job.finished]
    eta_at = max(job.end(mean, now) for job in running) if running and mean is not None else None
    return ValidationProgress(
        rounds=sum(job.rounds for job in jobs), done=sum(job.done for job in jobs),
        left=sum(job.rounds - job.done for job in running), round_s=mean, eta_at=eta_at,
        eta_s=max(0.0, (eta_at - now).total_seconds()) if eta_at is not None else None,
    )
