"""The inside of the trial sandbox: `python -m workers.sandbox.child JOBDIR`, or a warm
runner `python -m workers.sandbox.child --serve BACKEND RUNDIR PHASE`, or the isolation probe
`python -m workers.sandbox.child --probe PATHS`.

Reads JOBDIR/job.json (phase, trial spec, build directory, CPUs, limits, environment),
sets its resource limits, runs one phase of the trial with its backend and writes
JOBDIR/result.json. Progress within the run phase (check, then measure) is written to
JOBDIR/phase for the agent's heartbeats. Anything the kernel prints, and the Python
traceback of a fatal signal, lands in the job's output log, which the agent excerpts. A
warm runner sets the worker's caps as its hard limits, warms its backend up once, writes
RUNDIR/ready, then does the same for each job directory it reads from stdin, with that
trial's limits as soft limits (workers.sandbox.runner is its outside). Paths are as the sandbox
sees them. See workers.sandbox.phases for the outside of both.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from wire import per_token
from wire.contract import FailureReason, TrialSpec
from wire.failures import TrialFailure
from workers.backends import BackendUnavailable, get_backend
from workers.backends.base import Backend, CompiledKernel
from workers.compilers import controls
from workers.sandbox import limits as isolation_limits
from workers.sandbox.files import write_whole
from workers.sandbox.watch import PHASE_FILE
from workers.validation.rounds import run_validation_job

LOG_LIMIT = 16_000
_PR_SET_PDEATHSIG = 1


def _compile(backend: Backend, spec: TrialSpec, workdir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    controls.write(spec.acfs, workdir)  # part of the build: the run phase applies them too
    built = (backend.compile(spec.kernel, spec.config, workdir, compile_only=True) if spec.compile_only
             else backend.compile(spec.kernel, spec.config, workdir))
    report = dict(built.report)
    report.setdefault("compile_s", time.perf_counter() - started)
    return {"files": built.files, "report": report, "log": built.log[-LOG_LIMIT:]}


def _run(
    backend: Backend, spec: TrialSpec, job: dict[str, Any], jobdir: Path, partial: dict[str, Any]
) -> dict[str, Any]:
    b = job["built"]
    built = CompiledKernel(Path(b["directory"]), b.get("files", {}), b.get("report", {}), b.get("log", ""))
    write_whole(jobdir / PHASE_FILE, "check")
    started = time.perf_counter()
    outcome = backend.check(spec.kernel, spec.config, built)
    partial["timings"] = {"check_s": time.perf_counter() - started}
    partial["correctness"] = {"passed": outcome.passed, **outcome.details}
    if not outcome.passed:
        raise TrialFailure(
            FailureReason.WRONG_RESULT,
            "the output differs from the reference: " + json.dumps(_short(outcome.details), default=str),
            "correctness check failed:\n" + json.dumps(outcome.details, indent=1, default=str),
        )
    write_whole(jobdir / PHASE_FILE, "measure")
    started = time.perf_counter()
    metrics, environment = backend.measure(spec.kernel, spec.config, built, per_token.measured(spec.objectives),
                                           spec.measure)
    metrics.update(per_token.derived(metrics, spec.objectives, spec.kernel))
    partial["timings"]["measure_s"] = time.perf_counter() - started
    return {
        "metrics": {name: m.model_dump(mode="json") for name, m in metrics.items()},
        "environment": environment,
        "correctness": partial["correctness"],
        "timings": partial["timings"],
    }


def _short(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if not isinstance(v, list | dict)}


def run_job(jobdir: Path, warm: bool = False) -> dict[str, Any]:
    job = json.loads((jobdir / "job.json").read_text())
    if job.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job["cpus"])
    os.environ.update(job.get("env", {}))  # e.g. this job's TRITON_CACHE_DIR
    os.chdir(jobdir)
    limits = job.get("limits")
    partial: dict[str, Any] = {}
    try:
        if limits:
            backend_name = job["trial"]["kernel"]["backend"]
            (isolation_limits.apply_soft if warm else isolation_limits.apply)(limits, backend_name)
        if job.get("validation"):  # a validation job: checks and interleaved rounds
            return {"ok": True, **run_validation_job(job, jobdir, partial)}
        spec = TrialSpec.model_validate(job["trial"])
        backend = get_backend(spec.kernel.backend)
        if job["phase"] == "compile":
            return {"ok": True, **_compile(backend, spec, Path(job["workdir"]))}
        return {"ok": True, **_run(backend, spec, job, jobdir, partial)}
    except TrialFailure as failure:
        return {
            "ok": False,
            "reason": failure.reason.value,
            "message": failure.message,
            "log": failure.log[-LOG_LIMIT:],
            **partial,
        }
    except BackendUnavailable as exc:
        return {
            "ok": False,
            "reason": FailureReason.UNSUPPORTED.value,
            "message": str(exc),
            "log": "",
            **partial,
        }
    except BaseException as exc:  # user code may raise anything, even SystemExit
        return {
            "ok": False,
            "reason": FailureReason.ERROR.value,
            "message": isolation_limits.explain_exception(exc, limits) or f"{type(exc).__name__}: {exc}",
            "log": traceback.format_exc()[-LOG_LIMIT:],
            **partial,
        }


def die_with_agent(agent_pid: int | None) -> None:
    """If the agent is killed (SIGKILL leaves no chance to clean up), the sandbox dies too
    instead of running on unwatched: Linux delivers SIGKILL to it when its parent exits."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if agent_pid is not None and os.getppid() != agent_pid:
        os._exit(1)  # the agent died before the line above took effect (no PID namespace:
        # in one, the parent is bwrap, which dies with the agent and takes the namespace along)


def write_result(jobdir: Path, result: dict[str, Any]) -> None:
    partial_path = jobdir / "result.json.tmp"
    partial_path.write_text(json.dumps(result, default=str))
    os.replace(partial_path, jobdir / "result.json")


def flush_output() -> None:
    """Python's and C's buffered output (a kernel's printf) into the log before the next job."""
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def warm_up(backend_name: str, phase: str) -> dict[str, Any]:
    """Import the backend and let it prepare what every trial of `phase` needs (its `warm_up`)."""
    started = time.perf_counter()
    info: dict[str, Any] = {"pid": os.getpid(), "backend": backend_name, "phase": phase}
    try:
        get_backend(backend_name).warm_up(phase)
    except BaseException as exc:  # the trials will fail with the real reason
        info["warm_up_error"] = f"{type(exc).__name__}: {exc}"
    info["warm_up_s"] = time.perf_counter() - started
    return info


def serve(backend_name: str, rundir: Path, phase: str) -> None:
    cpus = os.environ.get("PARETUNE_SANDBOX_CPUS")
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
    caps = os.environ.pop("PARETUNE_SANDBOX_LIMITS", "")
    if caps:  # the worker's caps, as hard limits no trial of this runner can raise; CPU
        # time adds up over the runner's life, so each trial gets its own soft limit only
        isolation_limits.apply({**json.loads(caps), "cpu_s": None}, backend_name)
    info = warm_up(backend_name, phase)
    flush_output()
    ready = rundir / "ready.tmp"
    ready.write_text(json.dumps(info))
    os.replace(ready, rundir / "ready")
    for line in sys.stdin:
        if not line.strip():
            continue
        jobdir = Path(line.strip())
        result = run_job(jobdir, warm=True)
        flush_output()
        write_result(jobdir, result)
        os.chdir(rundir)
        gc.collect()  # the last trial's buffers go before the next one measures
    flush_output()
    os._exit(0)


def probe(paths: list[str]) -> dict[str, Any]:
    """What this sandbox can see and who it runs as: the agent checks it before claiming
    an isolation level (workers.sandbox.isolation.probe)."""
    from workers.measure import rapl

    with open("/proc/net/dev") as handle:
        interfaces = sorted(line.split(":")[0].strip() for line in handle.read().splitlines()[2:] if ":" in line)
    return {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "pid": os.getpid(),
        "pid_namespace": os.readlink("/proc/self/ns/pid"),
        "interfaces": interfaces,
        "readable": {path: os.access(path, os.R_OK) for path in paths},
        "rapl": bool(rapl.package_zones()),
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    agent_pid = os.environ.get("PARETUNE_AGENT_PID")
    die_with_agent(int(agent_pid) if agent_pid else None)
    faulthandler.enable()
    if args and args[0] == "--probe":
        print(json.dumps(probe(json.loads(args[1]))), flush=True)
        os._exit(0)
    if args and args[0] == "--serve":
        serve(args[1], Path(args[2]), args[3])
    jobdir = Path(args[0])
    result = run_job(jobdir)
    write_result(jobdir, result)
    flush_output()
    os._exit(0)  # skip interpreter teardown: user threads or atexit hooks cannot hang the exit


if __name__ == "__main__":
    main()
