"""Running one phase of a trial (compile, or run: check + measure) in its sandbox process,
and classifying how it ended.

The process is a warm runner when the backend uses one (workers.sandbox.runner), else a
fresh `python -m workers.sandbox.child JOBDIR` in a sandbox of the agent's isolation level,
with the trial's resource limits (workers.sandbox.limits), pinned to the phase's CPUs. The
agent writes the job's job.json; the process writes result.json (and its progress to
`phase`). On a timeout, a cancel or a limit (the job directory over its disk limit) the
process is killed, and after every phase everything it left running is
(Sandbox.sweep). A process that dies from a signal fails the phase with reason `crash` and
the signal's name, and the limit that most likely sent it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wire.contract import FailureReason, TrialSpec, ValidationSpec
from workers.sandbox import limits as isolation_limits
from workers.sandbox.context import Context
from workers.sandbox.files import UnsafeFile, read_untrusted, read_untrusted_tail, remove_tree
from workers.sandbox.jobs import Job
from workers.sandbox.runner import WarmRunner
from workers.sandbox.sandbox import Sandbox
from workers.sandbox.watch import disk_watch, progress, wait_until

log = logging.getLogger("paretune.worker")

LOG_EXCERPT_BYTES = 4096
_POLL_S = 0.05


@dataclass
class PhaseOutcome:
    ok: bool
    payload: dict[str, Any] = field(default_factory=dict)
    reason: FailureReason | None = None
    message: str = ""
    log: str = ""
    wall_s: float = 0.0
    abandoned: bool = False
    sandbox: dict[str, Any] = field(default_factory=dict)  # the process that ran it


@dataclass(frozen=True)
class Phase:
    """One phase of one piece of work, in its job directory."""

    name: str  # compile or run
    job: Job
    backend: str
    timeout_s: float
    limits: dict[str, Any]

    @property
    def timeout_name(self) -> str:
        return "compile_timeout_s" if self.name == "compile" else "run_timeout_s"


def tail(text: str, limit: int = LOG_EXCERPT_BYTES) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return "[...]\n" + data[-limit:].decode("utf-8", "replace")


@contextlib.contextmanager
def phase_job(
    phase: str, spec: TrialSpec | ValidationSpec, context: Context
) -> Iterator[tuple[Job, WarmRunner | None]]:
    """The job directory of one phase (in the warm runner's area when the backend uses
    one), removed afterwards."""
    sandbox, runners = context.sandbox, context.runners
    with sandbox.claim(phase, spec.study_id):
        runner = runners.get(phase, spec.kernel.backend, spec.study_id) if runners is not None else None
        job = runner.new_job() if runner is not None else sandbox.new_job(phase)
        try:
            yield job, runner
        finally:
            if not remove_tree(job.outside):
                log.warning("the job directory %s could not be removed", job.outside)
            if runner is not None:
                assert runners is not None
                runners.release(runner)


def run_phase(
    name: str,
    spec: TrialSpec | ValidationSpec,
    job: Job,
    runner: WarmRunner | None,
    context: Context,
    extra: dict[str, Any] | None = None,
) -> PhaseOutcome:
    """Run one phase in its sandbox (the warm `runner`, else a fresh process) and classify
    how it ended. `extra` goes into job.json beside the trial."""
    sandbox = context.sandbox
    timeout_s = spec.compile_timeout_s if name == "compile" else spec.run_timeout_s
    phase = Phase(name, job, spec.kernel.backend, timeout_s, sandbox.limits(spec))
    document = {
        "phase": name,
        "trial": spec.model_dump(mode="json"),
        "cpus": context.cpus(name),
        "limits": phase.limits,
        "env": job.env(),
        **(extra or {}),
    }
    (job.outside / "job.json").write_text(json.dumps(document, default=str))
    if runner is None:
        outcome = _run_fresh(phase, context)
        outcome.sandbox = {"warm": False, "isolation": sandbox.isolation.level.value}
        return outcome
    outcome = _run_warm(phase, runner, context)
    outcome.sandbox["isolation"] = sandbox.isolation.level.value
    return outcome


def _run_fresh(phase: Phase, context: Context) -> PhaseOutcome:
    sandbox, job = context.sandbox, phase.job
    output_path = sandbox.log_path(job.outside.name)
    command = sandbox.command(phase.name, phase.backend, [job.inside], sandbox.binds(job, phase.name),
                              chdir=job.inside)
    started = time.monotonic()
    with output_path.open("wb") as output:
        proc = sandbox.spawn(command, cwd=job.outside, env=sandbox.env(context.cpus(phase.name), job.inside),
                             stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    sandbox.runner_started(phase.name, proc.pid)  # while it runs, sweeps after other compiles spare it
    try:
        try:
            timed_out, abandoned, killed = wait_until(
                lambda: proc.poll() is not None, started, phase.timeout_s, context.cancel,
                progress(job.outside, context.on_phase, context.on_rounds), _POLL_S,
                disk_watch(job.outside, phase.limits),
            )
        finally:
            sandbox.runner_ended(phase.name, proc.pid)
        # the process on a timeout, a limit or a cancel; whatever it left behind in any case
        sandbox.sweep(phase.name, group=proc.pid)
        returncode = proc.wait()
    finally:
        sandbox.ended(proc.pid)
    wall_s = time.monotonic() - started
    output_tail = read_untrusted_tail(output_path, 0, LOG_EXCERPT_BYTES)
    output_path.unlink(missing_ok=True)
    if abandoned:
        return PhaseOutcome(False, abandoned=True, message="abandoned", wall_s=wall_s)
    if timed_out:
        return _timed_out(phase, wall_s, output_tail)
    if killed:
        return PhaseOutcome(False, reason=FailureReason.CRASH, message=killed, log=output_tail, wall_s=wall_s)
    return _classify(phase, _status(sandbox, returncode), output_tail, wall_s)


def _run_warm(phase: Phase, runner: WarmRunner, context: Context) -> PhaseOutcome:
    assert context.runners is not None
    job = phase.job
    served = runner.serve(job, phase.timeout_s, context.cancel,
                          progress(job.outside, context.on_phase, context.on_rounds),
                          disk_watch(job.outside, phase.limits))
    described = {**runner.describe(), "start_wait_s": served.wait_s}
    if served.abandoned:
        outcome = PhaseOutcome(False, abandoned=True, message="abandoned", wall_s=served.wall_s)
    elif served.start_failed:
        outcome = PhaseOutcome(False, reason=FailureReason.CRASH, message=served.start_failed,
                               log=served.output_tail, wall_s=served.wall_s)
    elif served.timed_out:
        outcome = _timed_out(phase, served.wall_s, served.output_tail)
    elif served.killed:
        outcome = PhaseOutcome(False, reason=FailureReason.CRASH, message=served.killed, log=served.output_tail,
                               wall_s=served.wall_s)
    else:
        returncode = 0 if served.returncode is None else _status(runner.sandbox, served.returncode)
        outcome = _classify(phase, returncode, served.output_tail, served.wall_s)
    # A runner serves on only after a clean trial; in the compile phase a compile error
    # reported by the compiler is clean too (nothing ran on the device).
    clean = served.returncode is None and (
        outcome.ok
        or served.abandoned  # cancelled before its job was sent: the runner is untouched
        or (phase.name == "compile" and outcome.reason == FailureReason.COMPILE_ERROR)
    )
    if not clean:
        context.runners.replace(runner)
    outcome.sandbox = described
    return outcome


def _status(sandbox: Sandbox, returncode: int) -> int:
    """The sandboxed command's exit status as Popen reports a process's (-N: signal N)."""
    if sandbox.isolation.namespaces and returncode > 128:
        return 128 - returncode  # bwrap exits with 128 + the signal that killed its command
    return returncode


def _timed_out(phase: Phase, wall_s: float, output_tail: str) -> PhaseOutcome:
    return PhaseOutcome(
        False,
        reason=FailureReason.TIMEOUT,
        wall_s=wall_s,
        log=output_tail,
        message=f"{phase.name} did not finish within {phase.timeout_name}={phase.timeout_s:g} s; "
        "its sandbox was killed",
    )


def _classify(phase: Phase, returncode: int, output_tail: str, wall_s: float) -> PhaseOutcome:
    try:
        payload = json.loads(read_untrusted(phase.job.outside / "result.json"))
        if not isinstance(payload, dict):
            payload = None
    except (UnsafeFile, ValueError):
        payload = None
    if payload is None:
        message = _no_result(phase, returncode)
        return PhaseOutcome(False, reason=FailureReason.CRASH, message=message, log=output_tail, wall_s=wall_s)
    if payload.get("ok"):
        return PhaseOutcome(True, payload=payload, log=output_tail, wall_s=wall_s)
    combined = tail(str(payload.get("log", "")))
    if output_tail.strip() and output_tail.strip() not in combined:
        combined = (combined + "\n--- sandbox output ---\n" + output_tail).strip()
    try:
        reason = FailureReason(payload.get("reason"))
    except ValueError:
        reason = FailureReason.ERROR
    if reason in (FailureReason.LEASE_EXPIRED, FailureReason.CANCELLED):
        reason = FailureReason.ERROR  # the service's to set, not a sandbox's
    return PhaseOutcome(False, payload=payload, reason=reason, message=str(payload.get("message", "")),
                        log=combined, wall_s=wall_s)


def _no_result(phase: Phase, returncode: int) -> str:
    """Why a process that wrote no result ended: the signal that killed it (and the limit
    that likely sent it), or its exit status."""
    if returncode >= 0:
        return f"the {phase.name} process exited with status {returncode} and no result"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    message = f"the {phase.name} process was killed by {name} (signal {-returncode})"
    why = isolation_limits.explain_signal(-returncode, phase.limits)
    return f"{message}; {why}" if why else message
