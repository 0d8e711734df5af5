"""Runs each phase of a trial in its own sandbox process, so that a compile error, a
segfault, a hang, a wrong result or a hostile kernel fails only that trial and never the
worker agent, its secrets or another team's trials.

A trial has two phases, each a fresh `python -m workers.sandbox.child` process (or a warm
runner, see workers.sandbox.runner) in a sandbox of the agent's isolation level
(workers.sandbox.isolation) with the trial's resource limits (workers.sandbox.limits):
  compile  under the trial's compile_timeout_s, on the compile CPUs, into the job's build
           directory; the agent then copies the build into the artifact cache (never the
           sandbox), so a configuration seen before skips this phase;
  run      check + measure under run_timeout_s, on the measurement CPUs, on a verified copy
           of the build; a compile-only trial has no run phase: its build's compiler
           report is its measurement (workers.compilers.ptxas).
On a timeout, a cancel or a limit (the job directory over its disk limit) the sandbox is
killed, and after every phase everything it left running is (workers.sandbox.jobs.sweep).
A process that dies from a signal fails the trial with reason `crash` and the signal name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import FailureReason, Metric, TrialResult, TrialSpec, ValidationSpec
from wire.failures import TrialFailure
from workers.backends import BackendUnavailable, get_backend, needs_compile
from workers.backends.base import CompiledKernel
from workers.cache import ArtifactCache
from workers.compilers.ptxas import compiled_check, metrics_of
from workers.sandbox import limits as isolation_limits
from workers.sandbox.files import UnsafeFile, read_untrusted
from workers.sandbox.isolation import sandbox_env
from workers.sandbox.jobs import BUILD, TOOL_CACHE, Job, Sandbox, default_sandbox
from workers.sandbox.runner import RunnerPool, WarmRunner, read_from, wait_until

log = logging.getLogger(__name__)

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


def tail(text: str, limit: int = LOG_EXCERPT_BYTES) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return "[...]\n" + data[-limit:].decode("utf-8", "replace")


def child_env(cpus: list[int] | None, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandbox process at the none level (an allow-list, never the
    agent's own environment), plus `overrides` (e.g. the GPU it may see)."""
    return sandbox_env(cpus, home=tempfile.gettempdir(), overrides=overrides, agent_pid=os.getpid())


@contextlib.contextmanager
def phase_job(
    sandbox: Sandbox, runners: RunnerPool | None, phase: str, spec: TrialSpec | ValidationSpec
) -> Iterator[tuple[Job, WarmRunner | None]]:
    """The job directory of one phase (in the warm runner's area when the backend uses
    one), removed afterwards."""
    with sandbox.claim(phase, spec.study_id):
        runner = runners.get(phase, spec.kernel.backend, spec.study_id) if runners is not None else None
        job = runner.new_job() if runner is not None else sandbox.new_job(phase)
        try:
            yield job, runner
        finally:
            shutil.rmtree(job.outside, ignore_errors=True)
            if runner is not None:
                assert runners is not None
                runners.release(runner)


def run_phase(
    phase: str,
    spec: TrialSpec | ValidationSpec,
    job: Job,
    timeout_s: float,
    *,
    sandbox: Sandbox,
    runner: WarmRunner | None = None,
    runners: RunnerPool | None = None,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    extra: dict[str, Any] | None = None,
) -> PhaseOutcome:
    """Run one phase in its sandbox (the warm `runner`, else a fresh process) and classify
    how it ended."""
    limits = sandbox.limits(spec)
    document = {
        "phase": phase,
        "trial": spec.model_dump(mode="json"),
        "cpus": cpus,
        "limits": limits,
        "env": sandbox.job_env(job),
        **(extra or {}),
    }
    (job.outside / "job.json").write_text(json.dumps(document, default=str))
    watch = sandbox.disk_watch(job.outside, limits)
    if runner is None:
        outcome = _run_fresh(phase, spec, job, timeout_s, sandbox, cpus, cancel, on_phase, watch, limits)
        outcome.sandbox = {"warm": False, "isolation": sandbox.isolation.level.value}
        return outcome
    assert runners is not None
    outcome = _run_warm(runners, runner, phase, job, timeout_s, cancel, on_phase, watch, limits)
    outcome.sandbox["isolation"] = sandbox.isolation.level.value
    return outcome


def _progress(job: Job, on_phase: Callable[[str], None] | None) -> Callable[[], None] | None:
    """A poll callback that tells `on_phase` when the sandbox reports a new phase."""
    if on_phase is None:
        return None
    seen = {"phase": ""}

    def poll() -> None:
        current = _read_phase(job)
        if current and current != seen["phase"]:
            seen["phase"] = current
            on_phase(current)

    return poll


def _run_fresh(
    phase: str,
    spec: TrialSpec | ValidationSpec,
    job: Job,
    timeout_s: float,
    sandbox: Sandbox,
    cpus: list[int] | None,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
    watch: Callable[[], str | None],
    limits: dict[str, Any],
) -> PhaseOutcome:
    output_path = sandbox.log_path(job.outside.name)
    command = sandbox.command(phase, spec.kernel.backend, [job.inside], sandbox.binds(job, phase), chdir=job.inside)
    started = time.monotonic()
    with output_path.open("wb") as output:
        proc = sandbox.spawn(command, cwd=job.outside, env=sandbox.env(cpus, job.inside), stdin=subprocess.DEVNULL,
                             stdout=output, stderr=subprocess.STDOUT)
    sandbox.runner_started(phase, proc.pid)  # while it runs, sweeps after other compiles spare it
    try:
        progress = _progress(job, on_phase)
        try:
            timed_out, abandoned, killed = wait_until(
                lambda: proc.poll() is not None, started, timeout_s, cancel, progress, _POLL_S, watch
            )
        finally:
            sandbox.runner_ended(phase, proc.pid)
        # the process on a timeout, a limit or a cancel; whatever it left behind in any case
        sandbox.sweep(phase, group=proc.pid)
        returncode = proc.wait()
    finally:
        sandbox.ended(proc.pid)
    wall_s = time.monotonic() - started
    output_tail = read_from(output_path, 0, LOG_EXCERPT_BYTES)
    output_path.unlink(missing_ok=True)
    if abandoned:
        return PhaseOutcome(False, abandoned=True, message="abandoned", wall_s=wall_s)
    if timed_out:
        return _timed_out(phase, timeout_s, wall_s, output_tail)
    if killed:
        return PhaseOutcome(False, reason=FailureReason.CRASH, message=killed, log=output_tail, wall_s=wall_s)
    return _classify(phase, job, _status(sandbox, returncode), output_tail, wall_s, limits)


def _status(sandbox: Sandbox, returncode: int) -> int:
    """The sandboxed command's exit status as Popen reports a process's (-N: signal N)."""
    if sandbox.isolation.namespaces and returncode > 128:
        return 128 - returncode  # bwrap exits with 128 + the signal that killed its command
    return returncode


def _timed_out(phase: str, timeout_s: float, wall_s: float, output_tail: str) -> PhaseOutcome:
    limit = "compile_timeout_s" if phase == "compile" else "run_timeout_s"
    return PhaseOutcome(
        False,
        reason=FailureReason.TIMEOUT,
        wall_s=wall_s,
        log=output_tail,
        message=f"{phase} did not finish within {limit}={timeout_s:g} s; its sandbox was killed",
    )


def _run_warm(
    runners: RunnerPool,
    runner: WarmRunner,
    phase: str,
    job: Job,
    timeout_s: float,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
    watch: Callable[[], str | None],
    limits: dict[str, Any],
) -> PhaseOutcome:
    served = runner.serve(job, timeout_s, cancel, _progress(job, on_phase), watch)
    sandbox = {**runner.describe(), "start_wait_s": served.wait_s}
    if served.abandoned:
        outcome = PhaseOutcome(False, abandoned=True, message="abandoned", wall_s=served.wall_s)
    elif served.start_failed:
        outcome = PhaseOutcome(
            False,
            reason=FailureReason.CRASH,
            message=served.start_failed,
            log=served.output_tail,
            wall_s=served.wall_s,
        )
    elif served.timed_out:
        outcome = _timed_out(phase, timeout_s, served.wall_s, served.output_tail)
    elif served.killed:
        outcome = PhaseOutcome(False, reason=FailureReason.CRASH, message=served.killed, log=served.output_tail,
                               wall_s=served.wall_s)
    else:
        returncode = 0 if served.returncode is None else _status(runner.sandbox, served.returncode)
        outcome = _classify(phase, job, returncode, served.output_tail, served.wall_s, limits)
    # A runner serves on only after a clean trial; in the compile phase a compile error
    # reported by the compiler is clean too (nothing ran on the device).
    clean = served.returncode is None and (
        outcome.ok
        or served.abandoned  # cancelled before its job was sent: the runner is untouched
        or (phase == "compile" and outcome.reason == FailureReason.COMPILE_ERROR)
    )
    if not clean:
        runners.replace(runner)
    outcome.sandbox = sandbox
    return outcome


def _read_phase(job: Job) -> str:
    try:
        return read_untrusted(job.outside / "phase", 64).decode("utf-8", "replace").strip()
    except UnsafeFile:
        return ""


def _classify(
    phase: str, job: Job, returncode: int, output_tail: str, wall_s: float, limits: dict[str, Any]
) -> PhaseOutcome:
    try:
        payload = json.loads(read_untrusted(job.outside / "result.json"))
        if not isinstance(payload, dict):
            payload = None
    except (UnsafeFile, ValueError):
        payload = None
    if payload is None:
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            message = f"the {phase} process was killed by {name} (signal {-returncode})"
            why = isolation_limits.explain_signal(-returncode, limits)
            if why:
                message += f"; {why}"
        else:
            message = f"the {phase} process exited with status {returncode} and no result"
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
    return PhaseOutcome(
        False,
        payload=payload,
        reason=reason,
        message=str(payload.get("message", "")),
        log=combined,
        wall_s=wall_s,
    )


@dataclass
class CompileStage:
    """What the run phase needs from the compile phase: the artifact (a verified copy,
    private to the agent), or the failure."""

    built: CompiledKernel | None = None
    failure: TrialResult | None = None
    cached: bool = False
    key: str = ""
    wall_s: float = 0.0
    abandoned: bool = False
    sandbox: dict[str, Any] = field(default_factory=dict)  # the compile process, if one ran

    def discard(self) -> None:
        """Remove the agent's private copy of the build (after the run phase)."""
        if self.built is not None and self.built.directory.parent.name.startswith("stage-"):
            shutil.rmtree(self.built.directory.parent, ignore_errors=True)


def failed(reason: FailureReason, message: str, log_text: str = "", **fields: Any) -> TrialResult:
    return TrialResult(
        status="failed",
        failure_reason=reason,
        message=message[:2000],
        log=tail(log_text, 16_000),
        **fields,
    )


def _stage_dir(sandbox: Sandbox) -> Path:
    stages = sandbox.root / "stages"
    stages.mkdir(mode=0o700, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stage-", dir=stages)) / "build"


def compile_trial(
    spec: TrialSpec,
    cache: ArtifactCache,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
) -> CompileStage:
    """Build the trial's artifact in a sandbox process (or find it in the cache), and give
    the run phase a verified copy of it."""
    sandbox = sandbox or default_sandbox()
    started = time.monotonic()
    try:
        backend = get_backend(spec.kernel.backend)
        if not needs_compile(backend):
            return CompileStage(built=CompiledKernel(_stage_dir(sandbox), report={"compile_s": 0.0}))
        key = backend.cache_key(spec.kernel, spec.config, compile_only=True) if spec.compile_only \
            else backend.cache_key(spec.kernel, spec.config)
    except BackendUnavailable as exc:
        return CompileStage(failure=failed(FailureReason.UNSUPPORTED, str(exc)))
    except TrialFailure as exc:
        return CompileStage(failure=failed(exc.reason, exc.message, exc.log))
    except Exception as exc:
        return CompileStage(failure=failed(FailureReason.ERROR, f"cache key: {exc}"))
    stage_dir = _stage_dir(sandbox)
    hit = cache.checkout(key, stage_dir)
    if hit is not None:
        return CompileStage(built=hit, cached=True, key=key, wall_s=time.monotonic() - started)
    shutil.rmtree(stage_dir.parent, ignore_errors=True)
    with phase_job(sandbox, runners, "compile", spec) as (job, runner):
        job.build.mkdir()
        sandbox.give(job.build, "compile")
        outcome = run_phase(
            "compile", spec, job, spec.compile_timeout_s, sandbox=sandbox, runner=runner, runners=runners,
            cpus=cpus, cancel=cancel, extra={"workdir": job.build_inside},
        )
        if outcome.ok:
            committed = _commit(cache, key, job, outcome.payload)
    wall_s = time.monotonic() - started
    if not outcome.ok:
        if outcome.abandoned:
            return CompileStage(abandoned=True, key=key, wall_s=wall_s)
        assert outcome.reason is not None
        result = failed(
            outcome.reason,
            outcome.message,
            outcome.log,
            timings={"compile_wall_s": wall_s},
            compile_report={"sandbox": outcome.sandbox},
        )
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    if isinstance(committed, str):
        result = failed(FailureReason.ERROR, committed, timings={"compile_wall_s": wall_s})
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    stage_dir = _stage_dir(sandbox)
    built = cache.checkout(key, stage_dir)
    if built is None:  # gone again already (pruned, or tampered with and discarded)
        shutil.rmtree(stage_dir.parent, ignore_errors=True)
        result = failed(FailureReason.ERROR, "the build vanished from the artifact cache right after it was made")
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    return CompileStage(built=built, key=key, wall_s=wall_s, sandbox=outcome.sandbox)


def _commit(cache: ArtifactCache, key: str, job: Job, payload: dict[str, Any]) -> CompiledKernel | str:
    """The sandbox's build copied into the cache by the agent; a message if it cannot be."""
    files = payload.get("files", {})
    report = payload.get("report", {})
    if not isinstance(files, dict) or not isinstance(report, dict):
        return "the compile sandbox reported a malformed build"
    report = {**report, "build_dir": job.build_inside}  # where paths recorded in the build point
    try:
        return cache.commit(key, CompiledKernel(job.build, files, report, str(payload.get("log", ""))))
    except (UnsafeFile, ValueError, OSError) as exc:
        return f"the build cannot go into the artifact cache: {exc}"


def place_build(sandbox: Sandbox, job: Job, built: CompiledKernel, name: str = BUILD) -> str:
    """The run phase's copy of a build in its job directory (as `name`): the agent's files,
    readable by the sandbox; only the Triton cache within is the sandbox's to write. Returns
    the copy's path as the sandbox sees it."""
    target, inside = job.outside / name, f"{job.inside}/{name}"
    if built.directory.is_dir():
        shutil.copytree(built.directory, target, symlinks=True)
    else:
        target.mkdir()
    tool_cache = target / TOOL_CACHE
    if not built.files:  # nothing built (the python backend): the trial may write its source here
        sandbox.give(target, "run")
    elif tool_cache.is_dir():
        _relocate(tool_cache, str(built.report.get("build_dir", "")), inside)
        sandbox.give(tool_cache, "run")
    return inside


def _relocate(directory: Path, old: str, new: str) -> None:
    """Paths a tool recorded at compile time (Triton's cache groups) point at this copy."""
    if not old or old == new:
        return
    for path in directory.rglob("*.json"):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < (1 << 20):
            text = path.read_text(errors="replace")
            if old in text:
                path.write_text(text.replace(f"{old}/", f"{new}/"))


def run_trial(
    spec: TrialSpec,
    stage: CompileStage,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
) -> TrialResult | None:
    """Check and measure a compiled trial in a sandbox process; None if it was abandoned."""
    sandbox = sandbox or default_sandbox()
    try:
        return _run_stage(spec, stage, sandbox, cpus, cancel, on_phase, runners)
    finally:
        stage.discard()


def _run_stage(
    spec: TrialSpec,
    stage: CompileStage,
    sandbox: Sandbox,
    cpus: list[int] | None,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
    runners: RunnerPool | None,
) -> TrialResult | None:
    if stage.abandoned:
        return None
    if stage.failure is not None:
        return stage.failure
    assert stage.built is not None
    built = stage.built
    compile_report = {**built.report, "cached": stage.cached, "cache_key": stage.key}
    compile_report.pop("build_dir", None)
    if stage.sandbox:
        compile_report["sandbox"] = stage.sandbox
    base_timings = {
        "compile_s": float(built.report.get("compile_s", 0.0)),
        "compile_wall_s": stage.wall_s,
    }
    if spec.compile_only:  # nothing runs: the compiler's report is the measurement
        return _compiled_result(spec, built, compile_report, base_timings)
    with phase_job(sandbox, runners, "run", spec) as (job, runner):
        place_build(sandbox, job, built)
        extra = {"built": {"directory": job.build_inside, "files": built.files, "report": built.report, "log": ""}}
        outcome = run_phase(
            "run", spec, job, spec.run_timeout_s, sandbox=sandbox, runner=runner, runners=runners, cpus=cpus,
            cancel=cancel, on_phase=on_phase, extra=extra,
        )
    if outcome.abandoned:
        return None
    payload = outcome.payload
    timings = {**base_timings, **_numbers(payload.get("timings", {})), "run_wall_s": outcome.wall_s}
    common = {
        "compile_report": compile_report,
        "timings": timings,
        "correctness": payload.get("correctness", {}) if isinstance(payload.get("correctness"), dict) else {},
        "environment": {**_mapping(payload.get("environment")), "sandbox": outcome.sandbox},
    }
    if not outcome.ok:
        assert outcome.reason is not None
        return failed(outcome.reason, outcome.message, outcome.log, **common)
    try:
        metrics = {name: Metric.model_validate(m) for name, m in payload["metrics"].items()}
        result = TrialResult(status="completed", metrics=metrics, **common)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return failed(FailureReason.ERROR, f"the sandbox reported unusable metrics: {exc}", outcome.log, **common)
    missing = [name for name in spec.objectives if name not in metrics]
    if missing:
        return failed(
            FailureReason.ERROR,
            f"the {spec.kernel.backend} backend measured no {missing}",
            **common,
        )
    log_text = tail(built.log) + ("\n" + outcome.log if outcome.log.strip() else "")
    result.log = tail(log_text.strip(), 16_000)
    return result


def _compiled_result(spec: TrialSpec, built: CompiledKernel, compile_report: dict[str, Any],
                     timings: dict[str, float]) -> TrialResult:
    """A compile-only trial's result, from its build's report (workers.compilers.ptxas)."""
    check = compiled_check(built)
    common: dict[str, Any] = {"compile_report": compile_report, "timings": timings,
                              "correctness": {"passed": check.passed, **check.details},
                              "environment": {"compile_only": True}}
    try:
        metrics = metrics_of(built.report, spec.objectives)
    except TrialFailure as exc:
        return failed(exc.reason, exc.message, **common)
    return TrialResult(status="completed", metrics=metrics, log=tail(built.log.strip(), 16_000), **common)


def _numbers(value: Any) -> dict[str, float]:
    """The durations a sandbox reported that are durations (finite, not negative)."""
    if not isinstance(value, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in value.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    }


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def execute_trial(
    spec: TrialSpec,
    cache: ArtifactCache,
    *,
    compile_cpus: list[int] | None = None,
    run_cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    sandbox: Sandbox | None = None,
    runners: RunnerPool | None = None,
) -> TrialResult | None:
    """Compile then run one trial, each phase sandboxed (no pipelining)."""
    stage = compile_trial(spec, cache, cpus=compile_cpus, cancel=cancel, sandbox=sandbox, runners=runners)
    return run_trial(spec, stage, cpus=run_cpus, cancel=cancel, sandbox=sandbox, runners=runners)
