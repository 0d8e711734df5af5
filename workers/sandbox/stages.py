"""The stages of a trial, each phase in its own sandbox process (workers.sandbox.phases),
so that a compile error, a segfault, a hang, a wrong result or a hostile kernel fails only
that trial and never the worker agent, its secrets or another team's trials:
  compile  under the trial's compile_timeout_s, on the compile CPUs, into the job's build
           directory; the agent then copies the build into the artifact cache (never the
           sandbox), so a configuration seen before skips this phase;
  run      check + measure under run_timeout_s, on the measurement CPUs, on a verified copy
           of the build; a compile-only trial has no run phase: its build's compiler
           report is its measurement (workers.compilers.ptxas).
The agent runs the two apart (the next trial compiles while this one measures);
`execute_trial` runs them one after the other.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import FailureReason, Metric, TrialResult, TrialSpec
from wire.failures import TrialFailure
from workers.backends import BackendUnavailable, get_backend, needs_compile
from workers.backends.base import CompiledKernel
from workers.cache import ArtifactCache
from workers.compilers.ptxas import compiled_check, metrics_of
from workers.sandbox.context import Context
from workers.sandbox.files import UnsafeFile
from workers.sandbox.jobs import BUILD, TOOL_CACHE, Job
from workers.sandbox.phases import PhaseOutcome, phase_job, run_phase, tail
from workers.sandbox.sandbox import Sandbox


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


def compile_trial(spec: TrialSpec, context: Context) -> CompileStage:
    """Build the trial's artifact in a sandbox process (or find it in the cache), and give
    the run phase a verified copy of it."""
    started = time.monotonic()
    try:
        key = _cache_key(spec)
    except BackendUnavailable as exc:
        return CompileStage(failure=failed(FailureReason.UNSUPPORTED, str(exc)))
    except TrialFailure as exc:
        return CompileStage(failure=failed(exc.reason, exc.message, exc.log))
    except Exception as exc:
        return CompileStage(failure=failed(FailureReason.ERROR, f"cache key: {exc}"))
    if key is None:  # nothing to build: the trial may write its source into an empty build
        return CompileStage(built=CompiledKernel(_stage_dir(context.sandbox), report={"compile_s": 0.0}))
    hit = _checkout(context, key)
    if hit is not None:
        return CompileStage(built=hit, cached=True, key=key, wall_s=time.monotonic() - started)
    with phase_job("compile", spec, context) as (job, runner):
        job.build.mkdir()
        context.sandbox.give(job.build, "compile")
        outcome = run_phase("compile", spec, job, runner, context, {"workdir": job.build_inside})
        committed = _commit(context.cache, key, job, outcome.payload) if outcome.ok else None
    wall_s = time.monotonic() - started
    if outcome.abandoned:
        return CompileStage(abandoned=True, key=key, wall_s=wall_s)
    if not outcome.ok:
        assert outcome.reason is not None
        result = failed(outcome.reason, outcome.message, outcome.log, timings={"compile_wall_s": wall_s},
                        compile_report={"sandbox": outcome.sandbox})
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    if isinstance(committed, str):
        result = failed(FailureReason.ERROR, committed, timings={"compile_wall_s": wall_s})
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    built = _checkout(context, key)
    if built is None:  # gone again already (pruned, or tampered with and discarded)
        result = failed(FailureReason.ERROR, "the build vanished from the artifact cache right after it was made")
        return CompileStage(failure=result, key=key, wall_s=wall_s, sandbox=outcome.sandbox)
    return CompileStage(built=built, key=key, wall_s=wall_s, sandbox=outcome.sandbox)


def _cache_key(spec: TrialSpec) -> str | None:
    """The build's key in the artifact cache; None when the backend builds nothing."""
    backend = get_backend(spec.kernel.backend)
    if not needs_compile(backend):
        return None
    if spec.compile_only:
        return backend.cache_key(spec.kernel, spec.config, compile_only=True)
    return backend.cache_key(spec.kernel, spec.config)


def _stage_dir(sandbox: Sandbox) -> Path:
    """A fresh directory, private to the agent, for the run phase's copy of a build."""
    stages = sandbox.root / "stages"
    stages.mkdir(mode=0o700, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stage-", dir=stages)) / "build"


def _checkout(context: Context, key: str) -> CompiledKernel | None:
    """A verified copy of the cached build, or None (its staging directory removed)."""
    stage_dir = _stage_dir(context.sandbox)
    built = context.cache.checkout(key, stage_dir)
    if built is None:
        shutil.rmtree(stage_dir.parent, ignore_errors=True)
    return built


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


def run_trial(spec: TrialSpec, stage: CompileStage, context: Context) -> TrialResult | None:
    """Check and measure a compiled trial in a sandbox process; None if it was abandoned."""
    try:
        return _run_stage(spec, stage, context)
    finally:
        stage.discard()


def _run_stage(spec: TrialSpec, stage: CompileStage, context: Context) -> TrialResult | None:
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
    with phase_job("run", spec, context) as (job, runner):
        place_build(context.sandbox, job, built)
        extra = {"built": {"directory": job.build_inside, "files": built.files, "report": built.report, "log": ""}}
        outcome = run_phase("run", spec, job, runner, context, extra)
    if outcome.abandoned:
        return None
    return _measured(spec, built, outcome, compile_report, base_timings)


def _measured(spec: TrialSpec, built: CompiledKernel, outcome: PhaseOutcome, compile_report: dict[str, Any],
              compile_timings: dict[str, float]) -> TrialResult:
    """A trial's result from what its run phase reported."""
    payload = outcome.payload
    timings = {**compile_timings, **_numbers(payload.get("timings", {})), "run_wall_s": outcome.wall_s}
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
        return failed(FailureReason.ERROR, f"the {spec.kernel.backend} backend measured no {missing}", **common)
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


def execute_trial(spec: TrialSpec, context: Context) -> TrialResult | None:
    """Compile then run one trial, each phase sandboxed (no pipelining)."""
    return run_trial(spec, compile_trial(spec, context), context)
