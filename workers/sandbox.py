"""Runs each phase of a trial in its own subprocess, so that a compile error, a segfault, a
hang or a wrong result fails only that trial and never the worker agent.

A trial has two phases, each a fresh `python -m workers.sandbox_child` process in its own
process group (session):
  compile  under the trial's compile_timeout_s, on the compile CPUs; the artifact goes into
           the on-disk cache, so a configuration seen before skips this phase;
  run      check + measure under run_timeout_s, on the measurement CPUs.
On a timeout or a cancel the whole process group is killed (SIGKILL), compilers included.
A process that dies from a signal fails the trial with reason `crash` and the signal name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import workers
from workers.backends import BackendUnavailable, get_backend, needs_compile
from workers.backends.base import CompiledKernel, TrialFailure
from workers.cache import ArtifactCache
from workers.contract import FailureReason, Metric, TrialResult, TrialSpec, ValidationSpec
from workers.runner import RunnerPool, WarmRunner, wait_until

log = logging.getLogger(__name__)

LOG_EXCERPT_BYTES = 4096
_POLL_S = 0.05
_PACKAGE_ROOT = str(Path(workers.__file__).resolve().parent.parent)


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


def _read_tail(path: Path, limit: int = LOG_EXCERPT_BYTES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("[...]\n" + text) if size > limit else text


def child_env(cpus: list[int] | None, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandbox process: this one's, plus `overrides` (e.g. the GPU
    it may see), the package on its path, and thread pools sized to its CPUs."""
    env = {**os.environ, **(overrides or {})}
    paths = [_PACKAGE_ROOT, os.getcwd(), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PARETUNE_AGENT_PID"] = str(os.getpid())
    if cpus:
        env["PARETUNE_SANDBOX_CPUS"] = ",".join(map(str, cpus))
    threads = str(len(cpus)) if cpus else env.get("OMP_NUM_THREADS", "")
    if threads:  # BLAS thread pools sized to the CPUs the phase may use
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = threads
    return env


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_phase(
    phase: str,
    spec: TrialSpec | ValidationSpec,
    jobdir: Path,
    timeout_s: float,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    extra: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    runners: RunnerPool | None = None,
) -> PhaseOutcome:
    """Run one phase in a sandbox process (a warm runner from `runners` when the backend
    uses one, else a fresh process) and classify how it ended."""
    job = {"phase": phase, "trial": spec.model_dump(mode="json"), "cpus": cpus, **(extra or {})}
    (jobdir / "job.json").write_text(json.dumps(job, default=str))
    runner = runners.get(phase, spec.kernel.backend) if runners is not None else None
    if runner is None:
        outcome = _run_fresh(phase, jobdir, timeout_s, cpus, cancel, on_phase, env)
        outcome.sandbox = {"warm": False}
        return outcome
    assert runners is not None
    return _run_warm(runners, runner, phase, jobdir, timeout_s, cancel, on_phase)


def _progress(jobdir: Path, on_phase: Callable[[str], None] | None) -> Callable[[], None] | None:
    """A poll callback that tells `on_phase` when the sandbox reports a new phase."""
    if on_phase is None:
        return None
    seen = {"phase": ""}

    def poll() -> None:
        current = _read_phase(jobdir)
        if current and current != seen["phase"]:
            seen["phase"] = current
            on_phase(current)

    return poll


def _run_fresh(
    phase: str,
    jobdir: Path,
    timeout_s: float,
    cpus: list[int] | None,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
    env: dict[str, str] | None,
) -> PhaseOutcome:
    output_path = jobdir / f"{phase}.log"
    started = time.monotonic()
    with output_path.open("wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.sandbox_child", str(jobdir)],
            cwd=jobdir,
            env=child_env(cpus, env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    progress = _progress(jobdir, on_phase)
    timed_out, abandoned = wait_until(lambda: proc.poll() is not None, started, timeout_s, cancel, progress, _POLL_S)
    _kill_group(proc.pid)  # the process on a timeout; strays it left behind otherwise
    returncode = proc.wait()
    wall_s = time.monotonic() - started
    output_tail = _read_tail(output_path)
    if abandoned:
        return PhaseOutcome(False, abandoned=True, message="abandoned", wall_s=wall_s)
    if timed_out:
        return _timed_out(phase, timeout_s, wall_s, output_tail)
    return _classify(phase, jobdir, returncode, output_tail, wall_s)


def _timed_out(phase: str, timeout_s: float, wall_s: float, output_tail: str) -> PhaseOutcome:
    limit = "compile_timeout_s" if phase == "compile" else "run_timeout_s"
    return PhaseOutcome(
        False,
        reason=FailureReason.TIMEOUT,
        wall_s=wall_s,
        log=output_tail,
        message=f"{phase} did not finish within {limit}={timeout_s:g} s; its process group was killed",
    )


def _run_warm(
    runners: RunnerPool,
    runner: WarmRunner,
    phase: str,
    jobdir: Path,
    timeout_s: float,
    cancel: threading.Event | None,
    on_phase: Callable[[str], None] | None,
) -> PhaseOutcome:
    served = runner.serve(jobdir, timeout_s, cancel, _progress(jobdir, on_phase))
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
    else:
        returncode = 0 if served.returncode is None else served.returncode
        outcome = _classify(phase, jobdir, returncode, served.output_tail, served.wall_s)
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


def _read_phase(jobdir: Path) -> str:
    try:
        return (jobdir / "phase").read_text().strip()
    except OSError:
        return ""


def _classify(phase: str, jobdir: Path, returncode: int, output_tail: str, wall_s: float) -> PhaseOutcome:
    try:
        payload = json.loads((jobdir / "result.json").read_text())
    except (OSError, ValueError):
        payload = None
    if payload is None:
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            message = f"the {phase} process was killed by {name} (signal {-returncode})"
        else:
            message = f"the {phase} process exited with status {returncode} and no result"
        return PhaseOutcome(False, reason=FailureReason.CRASH, message=message, log=output_tail, wall_s=wall_s)
    if payload.get("ok"):
        return PhaseOutcome(True, payload=payload, log=output_tail, wall_s=wall_s)
    combined = tail(payload.get("log", ""))
    if output_tail.strip() and output_tail.strip() not in combined:
        combined = (combined + "\n--- sandbox output ---\n" + output_tail).strip()
    return PhaseOutcome(
        False,
        payload=payload,
        reason=FailureReason(payload["reason"]),
        message=payload.get("message", ""),
        log=combined,
        wall_s=wall_s,
    )


@dataclass
class CompileStage:
    """What the run phase needs from the compile phase: the artifact, or the failure."""

    built: CompiledKernel | None = None
    failure: TrialResult | None = None
    cached: bool = False
    key: str = ""
    wall_s: float = 0.0
    abandoned: bool = False
    sandbox: dict[str, Any] = field(default_factory=dict)  # the compile process, if one ran


def failed(reason: FailureReason, message: str, log_text: str = "", **fields: Any) -> TrialResult:
    return TrialResult(
        status="failed",
        failure_reason=reason,
        message=message[:2000],
        log=tail(log_text, 16_000),
        **fields,
    )


def compile_trial(
    spec: TrialSpec,
    cache: ArtifactCache,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    env: dict[str, str] | None = None,
    runners: RunnerPool | None = None,
) -> CompileStage:
    """Build the trial's artifact (or find it in the cache) in a sandbox process."""
    started = time.monotonic()
    try:
        backend = get_backend(spec.kernel.backend)
        if not needs_compile(backend):
            return CompileStage(built=CompiledKernel(cache.root, report={"compile_s": 0.0}))
        key = backend.cache_key(spec.kernel, spec.config)
    except BackendUnavailable as exc:
        return CompileStage(failure=failed(FailureReason.UNSUPPORTED, str(exc)))
    except TrialFailure as exc:
        return CompileStage(failure=failed(exc.reason, exc.message, exc.log))
    except Exception as exc:
        return CompileStage(failure=failed(FailureReason.ERROR, f"cache key: {exc}"))
    hit = cache.lookup(key)
    if hit is not None:
        return CompileStage(built=hit, cached=True, key=key, wall_s=time.monotonic() - started)
    staging = cache.staging()
    jobdir = Path(tempfile.mkdtemp(prefix="compile-", dir=cache.root / "staging"))
    try:
        outcome = run_phase(
            "compile",
            spec,
            jobdir,
            spec.compile_timeout_s,
            cpus=cpus,
            cancel=cancel,
            extra={"workdir": str(staging)},
            env=env,
            runners=runners,
        )
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)
    wall_s = time.monotonic() - started
    if not outcome.ok:
        cache.discard(staging)
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
    payload = outcome.payload
    built = CompiledKernel(staging, payload.get("files", {}), payload.get("report", {}), payload.get("log", ""))
    return CompileStage(built=cache.commit(key, built), key=key, wall_s=wall_s, sandbox=outcome.sandbox)


def run_trial(
    spec: TrialSpec,
    stage: CompileStage,
    work_root: Path,
    *,
    cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    runners: RunnerPool | None = None,
) -> TrialResult | None:
    """Check and measure a compiled trial in a sandbox process; None if it was abandoned."""
    if stage.abandoned:
        return None
    if stage.failure is not None:
        return stage.failure
    assert stage.built is not None
    built = stage.built
    compile_report = {**built.report, "cached": stage.cached, "cache_key": stage.key}
    if stage.sandbox:
        compile_report["sandbox"] = stage.sandbox
    base_timings = {
        "compile_s": float(built.report.get("compile_s", 0.0)),
        "compile_wall_s": stage.wall_s,
    }
    extra = {
        "built": {
            "directory": str(built.directory),
            "files": built.files,
            "report": built.report,
            "log": "",
        }
    }
    jobdir = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    try:
        outcome = run_phase(
            "run",
            spec,
            jobdir,
            spec.run_timeout_s,
            cpus=cpus,
            cancel=cancel,
            on_phase=on_phase,
            extra=extra,
            env=env,
            runners=runners,
        )
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)
    if outcome.abandoned:
        return None
    payload = outcome.payload
    timings = {**base_timings, **payload.get("timings", {}), "run_wall_s": outcome.wall_s}
    common = {
        "compile_report": compile_report,
        "timings": timings,
        "correctness": payload.get("correctness", {}),
        "environment": {**payload.get("environment", {}), "sandbox": outcome.sandbox},
    }
    if not outcome.ok:
        assert outcome.reason is not None
        return failed(outcome.reason, outcome.message, outcome.log, **common)
    metrics = {name: Metric.model_validate(m) for name, m in payload["metrics"].items()}
    missing = [name for name in spec.objectives if name not in metrics]
    if missing:
        return failed(
            FailureReason.ERROR,
            f"the {spec.kernel.backend} backend measured no {missing}",
            **common,
        )
    log_text = tail(built.log) + ("\n" + outcome.log if outcome.log.strip() else "")
    return TrialResult(
        status="completed",
        metrics=metrics,
        log=tail(log_text.strip(), 16_000),
        **common,
    )


def execute_trial(
    spec: TrialSpec,
    cache: ArtifactCache,
    *,
    compile_cpus: list[int] | None = None,
    run_cpus: list[int] | None = None,
    cancel: threading.Event | None = None,
    runners: RunnerPool | None = None,
) -> TrialResult | None:
    """Compile then run one trial, each phase sandboxed (no pipelining)."""
    stage = compile_trial(spec, cache, cpus=compile_cpus, cancel=cancel, runners=runners)
    return run_trial(spec, stage, cache.root / "staging", cpus=run_cpus, cancel=cancel, runners=runners)
