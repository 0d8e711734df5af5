"""A study's scheduling step: everything that needs the sampler or the whole study, batched
and off the request path.

One step is one short transaction under the study's lock (taken with SKIP LOCKED on
Postgres, so a replica that finds another one stepping the study moves on):
1. account for the trials that finished since the last step (`told` false): tell the
   sampler, count them, update the front, the ratios to the baseline and the hypervolume;
   then decide on the trials whose screening stage reported (service.scheduling.promotion);
2. settle the study (budget spent, too many failures, wall time over);
3. ask the sampler for new trials until `parallelism` are in flight, at most a batch.
Everything is committed together, so a replica that dies mid-step leaves nothing half
done: the next step, on any replica, finds the same untold trials.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from service.domain import schedule
from service.domain.states import STUDY_FINISHED, TRIAL, StudyState, TrialState
from service.scheduling import feasibility, fronts, promotion
from service.scheduling.asks import SamplerWaits, SpaceExhausted
from service.scheduling.mirror import Mirror, MirrorCache, StudyMirror
from service.store.db import lock_study, next_seq, next_seqs
from service.store.models import Study, Trial, constant, constants
from service.studies import document as sd
from service.studies import lifecycle
from service.studies.document import document_of
from service.trials import queries, shares
from service.trials.queries import LIGHT
from service.trials.transitions import awaiting_tell, queue, touch, touch_ids, transition
from wire.contract import FailureReason

ASKS_PER_STEP = 64  # one step asks for at most this many trials...
# ...and asks as many as it accounted for (the queue keeps its level however long steps
# take), then more until this long after taking the lock (the queue grows to the study's
# parallelism); the next step asks for the rest
ASK_UNTIL_S = 0.025
TELLS_PER_STEP = 1000
# what accounting for a finished trial may change (with told and seq)
ACCOUNTED_COLUMNS = ("completed_index", "relative", "on_front", "hypervolume_after")


@dataclass
class StepReport:
    study_id: int
    accounted: int = 0
    queued: int = 0
    running: int = 0  # the study's trials leased when the step began
    waiting_before: int = 0  # its trials waiting (queued, paused, screened) before the step asked for more
    waiting: int = 0  # and once the step is done (both from its counts)
    trial_s: float | None = None  # how long the trials it accounted for held their leases, on average
    more: bool = False  # the study has more to do right away (another step)
    changed: bool = False
    locked_at: float = 0.0  # perf_counter() when the study's lock was taken


def run_step(session: Session, cache: MirrorCache, study_id: int, *, wait: bool = False) -> StepReport | None:
    """One step of `study_id`; None when another transaction holds the study's lock."""
    study = lock_study(session, study_id, skip_locked=not wait)
    if study is None:
        exists = session.execute(select(Study.id).where(Study.id == study_id)).scalar_one_or_none()
        return None if exists is not None else StepReport(study_id)
    report = StepReport(study.id, locked_at=time.perf_counter())
    untold = list(session.execute(
        select(Trial).options(*LIGHT).where(Trial.study_id == study.id, awaiting_tell(Trial))
        .order_by(Trial.finished_at, Trial.id).limit(TELLS_PER_STEP)
    ).scalars())
    if not untold and study.state in STUDY_FINISHED:
        return report
    mirror = cache.get(session, study)
    # every sequence number the step may need, in one round trip (unused ones are skipped)
    seqs = iter(next_seqs(session, len(untold) + min(ASKS_PER_STEP, study.parallelism) + 1))
    tallies = read_tallies(session, study, untold)  # before the step writes anything
    decided = 0
    unseen = [t for t in untold if not promotion.deferred(t)]  # a deferred screen counted when first seen
    if untold:
        decided = _account(session, study, mirror, untold, seqs)
        report.accounted = len(unseen)
        report.more = len(untold) == TELLS_PER_STEP
    tallies.tell([t for t in untold if t.told])
    pace = (max(1, report.accounted), report.locked_at + ASK_UNTIL_S)
    counts = counts_of(study, tallies)
    report.running, report.waiting_before = counts.running, max(0, counts.waiting)
    asked, room = _settle_and_refill(session, study, mirror, pace, seqs, tallies, counts)
    report.queued = asked.queued
    report.more = report.more or report.queued < room  # the next step asks for the rest
    # a screen decided after it was deferred changes the study too: other processes'
    # mirrors then read the decision (MirrorCache.get)
    report.changed = bool(report.accounted or decided or report.queued or asked.refused)
    report.waiting = max(0, counts_of(study, tallies).waiting)
    if report.changed:
        lifecycle.touch(session, study, next(seqs, None))
    session.flush()  # the accounted trials and the study's row, one round trip each
    ids = queue(session, asked.rows)
    report.trial_s = shares.add_usage(session, study, unseen)
    for trial_id, row, optuna_id in zip(ids, asked.rows, asked.optuna_ids, strict=True):
        mirror.adopt(trial_id, row["number"], row["seq"], optuna_id)
    mirror.persist(session)  # a search engine's state, committed with the step
    mirror.stepped_at = study.seq
    if study.state in STUDY_FINISHED:  # its sampler is done: a straggler's step rebuilds the mirror
        cache.drop(study.id)
    return report


def _account(session: Session, study: Study, mirror: StudyMirror, untold: list[Trial], seqs: Iterator[int]) -> int:
    """Tell the sampler and the front of the finished trials, and decide the screened ones;
    returns how many screened trials were decided."""
    if mirror.front is None:
        mirror.front = fronts.load_front(session, study)
    completed: list[Trial] = []
    screened = [t for t in untold if t.state == TrialState.SCREENED]  # decided once the front is up to date
    finished = [t for t in untold if t.state != TrialState.SCREENED]
    left: set[int] = set()  # pushed off the front
    for trial in finished:
        mirror.learn(trial)
        trial.told = True
        if trial.state == TrialState.COMPLETED:
            fronts.on_completed(session, study, trial, mirror.front, left)
            completed.append(trial)
        elif trial.state == TrialState.FAILED:
            study.n_failed += 1
        else:
            study.n_cancelled += 1
    here = {t.id: t for t in completed}
    for trial_id in left & here.keys():
        here[trial_id].on_front = False
    # new sequence numbers: their ratios, front membership and index are new, and an event
    # stream that read past a result committed late sees the trial again now (the screened
    # get theirs as they are decided)
    touch(session, finished, seqs)
    for trial in finished:  # the same columns on every row: the flush writes them in one statement
        for name in ACCOUNTED_COLUMNS:
            flag_modified(trial, name)
    touch_ids(session, left - here.keys(), on_front=False)  # event streams see them leave the front
    if not screened:
        return 0
    assert isinstance(mirror, Mirror), "a study that screens has an Optuna sampler (documents refuse compileiq's)"
    return promotion.decide(session, study, mirror, screened)


@dataclass
class Tallies:
    """What a step counts of its study's trials in the database, read before it writes
    anything (so that nothing is flushed early and the study's row is written once): trials
    running, the infeasible ones told, and the latest trials for a streak of them; then the
    trials the step told (`tell`)."""

    running: int
    infeasible: int
    latest: list[tuple[int, str, str | None, bool]]  # (id, state, failure_reason, told), newest first
    told_now: set[int] = field(default_factory=set)

    def tell(self, trials: list[Trial]) -> None:
        """`trials` were told by this step (the database has them untold until it flushes)."""
        self.told_now = {t.id for t in trials}
        self.infeasible += sum(_infeasible(t.state, t.failure_reason) for t in trials)

    def in_a_row(self) -> int:
        """How many of the latest trials (by number, cancelled ones aside) are infeasible and told."""
        streak = 0
        for trial_id, state, reason, told in self.latest:
            if not (_infeasible(state, reason) and (told or trial_id in self.told_now)):
                break
            streak += 1
        return streak


def _infeasible(state: str, reason: str | None) -> bool:
    return state == TrialState.FAILED and reason == FailureReason.INFEASIBLE


def read_tallies(session: Session, study: Study, untold: list[Trial]) -> Tallies:
    running, infeasible = session.execute(
        select(func.count().filter(Trial.state == constant(TrialState.RUNNING.value)),
               func.count().filter(and_(*queries.infeasible())))
        .where(Trial.study_id == study.id,
               Trial.state.in_(constants((TrialState.RUNNING.value, TrialState.FAILED.value))))
    ).one()
    latest: list[tuple[int, str, str | None, bool]] = []
    if infeasible or any(_infeasible(t.state, t.failure_reason) for t in untold):
        cap = document_of(study).budget.max_infeasible_in_a_row or sd.DEFAULT_INFEASIBLE_IN_A_ROW
        rows = session.execute(
            select(Trial.id, Trial.state, Trial.failure_reason, Trial.told)
            .where(Trial.study_id == study.id, Trial.state != TrialState.CANCELLED.value)
            .order_by(Trial.number.desc()).limit(cap))
        latest = [(row.id, row.state, row.failure_reason, row.told) for row in rows]
    return Tallies(int(running), int(infeasible), latest)


def counts_of(study: Study, tallies: Tallies, refused: int = 0, in_a_row: int | None = None) -> schedule.Counts:
    """The study's counts as its step sees them: its row as the step changed it, the tallies,
    and `refused` proposals this step failed at once (`in_a_row`: the streak they ended on)."""
    budget = document_of(study).budget
    return schedule.Counts(
        state=study.state, created=study.n_created, completed=study.n_completed, failed=study.n_failed,
        cancelled=study.n_cancelled, screened_out=study.n_screened_out, running=tallies.running,
        max_trials=study.max_trials, max_failed=study.max_failed_trials, parallelism=study.parallelism,
        past_wall_time=lifecycle.past_wall_time(study), infeasible=tallies.infeasible + refused,
        infeasible_in_a_row=tallies.in_a_row() if in_a_row is None else in_a_row,
        count_infeasible=budget.count_infeasible, max_infeasible=budget.max_infeasible,
        max_infeasible_in_a_row=budget.max_infeasible_in_a_row,
    )


def _settle_and_refill(session: Session, study: Study, mirror: StudyMirror, pace: tuple[int, float],
                       seqs: Iterator[int], tallies: Tallies, counts: schedule.Counts) -> tuple[Asked, int]:
    """(what this step asked and queued, trials the study has room for); `counts`: the
    study's as the step found them once it had accounted for its results."""
    settlement = schedule.settle(counts, study.finish_reason)
    if settlement is not None:
        lifecycle.apply_settlement(session, study, settlement)
        return Asked(), 0
    room = schedule.asks_wanted(counts, study.max_trials)
    asked = _ask(session, study, mirror, min(room, ASKS_PER_STEP), counts, pace, seqs)
    if asked.refused or asked.budget_left == 0:
        # the budget or the space is spent (done once all report), or refusals reached a cap
        settlement = schedule.settle(counts_of(study, tallies, asked.refused, asked.in_a_row), study.finish_reason)
        if settlement is not None:
            lifecycle.apply_settlement(session, study, settlement)
            return asked, asked.queued
        if asked.budget_left == 0:
            room = asked.queued
    if asked.waiting:  # the sampler asks again once trials in flight report
        room = asked.queued
    return asked, room


@dataclass
class Asked:
    queued: int = 0
    refused: int = 0  # infeasible on the study's target: failed before queuing
    budget_left: int = 0
    waiting: bool = False  # the sampler proposes nothing until trials in flight are told
    in_a_row: int = 0  # the latest trials infeasible in a row once it asked
    rows: list[dict[str, Any]] = field(default_factory=list)  # the trials queued (inserted by `queue`)
    optuna_ids: list[int] = field(default_factory=list)  # their sampler ids


def _ask(session: Session, study: Study, mirror: StudyMirror, wanted: int, counts: schedule.Counts,
         pace: tuple[int, float], seqs: Iterator[int]) -> Asked:
    """Queue up to `wanted` trials within the budget. A proposal that cannot launch on the
    study's target is recorded failed (infeasible) and told to the sampler at once, and the
    sampler asked again; it takes a place in the budget only if the study counts them.
    `pace` is (how many to ask whatever the time, the time after which to ask no more)."""
    at_least, deadline = pace
    asked = Asked(budget_left=counts.budget_left, in_a_row=counts.infeasible_in_a_row)
    document = document_of(study)
    screen = document.measure.screen
    stage = "screen" if screen else None  # a study that screens measures every trial so first
    requires_energy = bool(set(screen.objectives or ()) & sd.ENERGY_OBJECTIVES) if screen else study.requires_energy
    while asked.queued < wanted and asked.budget_left > 0:
        if asked.queued + asked.refused >= at_least and time.perf_counter() > deadline:
            break
        if _capped(counts, asked.refused, asked.in_a_row):
            break  # the study fails at its settlement
        try:
            params, sampler_state, optuna_id = mirror.ask(study.n_created)
        except SamplerWaits:
            asked.waiting = True
            break
        except SpaceExhausted as exc:  # nothing new is left to try
            study.max_trials = counts.max_trials - asked.budget_left
            study.finish_reason = exc.reason
            asked.budget_left = 0
            break
        refusal = mirror.feasibility.refusal(session, study, params)
        row = dict(
            study_id=study.id,
            number=study.n_created,
            state=TRIAL.initial.value,
            seq=next(seqs, None) or next_seq(session),
            pool=study.pool,
            backend=study.backend,
            requires_energy=requires_energy,
            requires_gpu=document.requires_gpu,
            stage=stage,
            is_baseline=study.n_created == 0,
            config=params,
            sampler_state=sampler_state,
            max_attempts=document.limits.max_attempts,
        )
        study.n_created += 1
        if refusal is None:
            asked.rows.append(row)
            asked.optuna_ids.append(optuna_id)
            asked.queued += 1
            asked.budget_left -= 1
            asked.in_a_row = 0
        else:
            trial = Trial(**row)
            session.add(trial)
            _refuse(session, study, mirror, trial, optuna_id, refusal)
            asked.refused += 1
            asked.budget_left -= 1 if counts.count_infeasible else 0
            asked.in_a_row += 1
    return asked


def _capped(counts: schedule.Counts, refused: int, in_a_row: int) -> bool:
    """Whether this step's refusals have reached one of the study's caps on infeasible trials."""
    if counts.max_infeasible_in_a_row is not None and in_a_row >= counts.max_infeasible_in_a_row:
        return True
    return counts.max_infeasible is not None and counts.infeasible + refused > counts.max_infeasible


def _refuse(session: Session, study: Study, mirror: StudyMirror, trial: Trial, optuna_id: int,
            refusal: feasibility.Refusal) -> None:
    """Fail a proposal that cannot launch before any worker sees it, account for it and tell
    the sampler now, so that the next proposal of this step already knows."""
    session.flush()  # its id, for the sampler mirror
    transition(session, trial, TrialState.FAILED, failure_reason=FailureReason.INFEASIBLE.value,
         message=refusal.message, compile_report=refusal.report(), told=True)
    study.n_failed += 1
    mirror.adopt(trial.id, trial.number, trial.seq, optuna_id)
    mirror.learn(trial)


def pending_studies(session: Session, limit: int = 1000) -> list[int]:
    """Studies with work for their step: untold finished trials, or room for more trials."""
    reported = select(Trial.study_id).where(awaiting_tell(Trial)).distinct()
    active = Study.n_created - Study.n_completed - Study.n_failed - Study.n_cancelled - Study.n_screened_out
    # infeasible trials (among the failed) may not count against max_trials: a study has room
    # only if its trials less its failed ones are under it, and its step decides
    room = select(Study.id).where(
        Study.state == StudyState.RUNNING.value, Study.n_created - Study.n_failed < Study.max_trials,
        active < Study.parallelism,
    )
    ids = {row[0] for row in session.execute(reported.limit(limit))}
    ids |= {row[0] for row in session.execute(room.limit(limit))}
    return sorted(ids)
