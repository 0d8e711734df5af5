"""The inside of a validation job's run sandbox (one process, called from workers.sandbox.child).

First every configuration's correctness on the extended shapes (fresh random inputs, the
backend's own check), then `rounds` interleaved rounds: each round measures the baseline and
every correct candidate once, with the backend's own measure(), in an order rotated by one
each round so that no configuration always runs first (or always right after another).
A round's value of an objective is that measurement's value (a median over its samples).

Progress goes to JOBDIR/phase ("check candidate 12", "round 3/20: baseline"): the agent
shows it in heartbeats and, if the process dies, names the configuration that killed it.
The seconds each round took go to JOBDIR/rounds after every round: the agent sends them in
heartbeats, from which the service shows rounds done and left and an ETA.
What was checked and measured so far is kept in `partial` (returned with an error) and
saved to JOBDIR/validation-progress.json after every step (read back after a crash).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from wire import per_token
from wire.contract import FailureReason, KernelSpec, ShapeCorrectness, ValidationSpec, WorkloadShape
from wire.failures import TrialFailure
from workers.backends import get_backend
from workers.backends.base import Backend, CompiledKernel
from workers.backends.gpu_loader import shape_key
from workers.compilers import controls
from workers.sandbox.files import UnsafeFile, read_untrusted, write_whole
from workers.sandbox.jobs import use_build
from workers.sandbox.watch import PHASE_FILE, ROUNDS_FILE

BASELINE = "baseline"
PROGRESS_FILE = "validation-progress.json"


def label(candidate_id: int | None) -> str:
    return BASELINE if candidate_id is None else f"candidate {candidate_id}"


def round_order(count: int, round_index: int) -> list[int]:
    """Indices of `count` configurations in the order round `round_index` measures them:
    rotated by one each round, so over `count` rounds each goes first exactly once."""
    shift = round_index % count if count else 0
    return [(i + shift) % count for i in range(count)]


def shape_results(details: dict[str, Any], passed: bool, shapes: list[WorkloadShape]) -> list[ShapeCorrectness]:
    """Per-shape correctness from a backend check's details: the cpu backend lists shapes
    with rel_err against one tolerance, the GPU backends map shape keys to their verdicts;
    a backend that checks no shapes gives one entry for the whole check."""
    tolerance = details.get("tolerance")
    tolerance = float(tolerance) if isinstance(tolerance, int | float) else None
    entries = details.get("shapes")
    by_key = {shape_key(s.dims): s.dims for s in shapes}
    results = []
    if isinstance(entries, list):  # cpu: [{"dims", "max_abs_err", "rel_err"}]
        for entry in entries:
            errors = _numbers(entry, exclude=("dims",))
            relative = errors.get("rel_err", math.inf)
            ok = math.isfinite(relative) and (tolerance is None or relative <= tolerance)
            results.append(ShapeCorrectness(dims=entry.get("dims", {}), passed=ok, errors=errors, tolerance=tolerance))
    elif isinstance(entries, dict):  # GPU: {shape key: {"rel_l2_err", ..., "passed"}}
        for key, entry in entries.items():
            results.append(
                ShapeCorrectness(
                    dims=by_key.get(key, {}),
                    passed=bool(entry.get("passed")),
                    errors=_numbers(entry, exclude=("passed",)),
                    tolerance=tolerance,
                )
            )
    else:
        results.append(ShapeCorrectness(dims={}, passed=passed, errors={}, tolerance=tolerance))
    return results


def _numbers(entry: dict[str, Any], exclude: tuple[str, ...]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in entry.items()
        if k not in exclude and isinstance(v, int | float) and not isinstance(v, bool)
    }


def save_progress(jobdir: Path, partial: dict[str, Any]) -> None:
    write_whole(jobdir / PROGRESS_FILE, json.dumps(partial, default=str))


def read_progress(jobdir: Path) -> dict[str, Any]:
    """What a run sandbox saved of its progress (read by the agent: a sandbox's file)."""
    try:
        saved = json.loads(read_untrusted(jobdir / PROGRESS_FILE))
    except (UnsafeFile, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _failure(reason: FailureReason, message: str) -> dict[str, str]:
    return {"reason": reason.value, "message": message[:2000]}


def _check(
    backend: Backend, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel, record: dict[str, Any]
) -> None:
    shapes = kernel.workload
    use_build(built.directory)
    try:
        outcome = backend.check(kernel, config, built)
    except TrialFailure as exc:
        record.update(correct=False, failure=_failure(exc.reason, exc.message))
        return
    except Exception as exc:  # user code may raise anything
        record.update(correct=False, failure=_failure(FailureReason.ERROR, f"{type(exc).__name__}: {exc}"))
        record["log"] = traceback.format_exc()[-4000:]
        return
    results = shape_results(outcome.details, outcome.passed, shapes)
    record["correctness"] = [r.model_dump(mode="json") for r in results]
    record["correct"] = bool(outcome.passed) and all(r.passed for r in results)
    if not record["correct"]:
        wrong = [shape_key(r.dims) or "the check" for r in results if not r.passed]
        record["failure"] = _failure(FailureReason.WRONG_RESULT, f"wrong result on {', '.join(wrong)}")


def _measure(
    backend: Backend, spec: ValidationSpec, config: dict[str, Any], built: CompiledKernel, record: dict[str, Any],
    jobdir: Path,
) -> bool:
    """One measurement of one configuration appended to its record; False if it failed. A
    compile-only study's round compiles the configuration again (its compile metrics and time)."""
    use_build(built.directory)
    try:
        if spec.compile_only:
            built = _compiled_again(backend, spec, config, built, jobdir)
        metrics, environment = backend.measure(spec.kernel, config, built, per_token.measured(spec.objectives),
                                               spec.measure)
        metrics.update(per_token.derived(metrics, spec.objectives, spec.kernel))
    except TrialFailure as exc:
        record["failure"] = _failure(exc.reason, exc.message)
        return False
    except Exception as exc:
        record["failure"] = _failure(FailureReason.ERROR, f"{type(exc).__name__}: {exc}")
        return False
    missing = [name for name in spec.objectives if name not in metrics]
    if missing:
        record["failure"] = _failure(FailureReason.ERROR, f"the {backend.name} backend measured no {missing}")
        return False
    for name in spec.objectives:
        record["values"].setdefault(name, []).append(metrics[name].value)
        record["units"][name] = metrics[name].unit
    record["environments"].append(environment)
    return True


def _compiled_again(backend: Backend, spec: ValidationSpec, config: dict[str, Any], built: CompiledKernel,
                    jobdir: Path) -> CompiledKernel:
    rounds = jobdir / "rounds"
    rounds.mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(dir=rounds))
    controls.write(spec.acfs, workdir)
    try:
        return backend.compile(spec.kernel, config, workdir, compile_only=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_validation_job(job: dict[str, Any], jobdir: Path, partial: dict[str, Any]) -> dict[str, Any]:
    """Check every configuration, then measure the correct ones in interleaved rounds."""
    spec = ValidationSpec.model_validate(job["trial"])
    backend = get_backend(spec.kernel.backend)
    work = job["validation"]
    shapes = [WorkloadShape.model_validate(s) for s in work["shapes"]]
    check_kernel = spec.kernel.model_copy(update={"workload": shapes})
    configs: dict[str, dict[str, Any]] = {}
    partial.update(configs=configs, order=[], rounds=0, round_s=[], timings={})
    built: dict[str, tuple[dict[str, Any], CompiledKernel]] = {}
    for item in work["configs"]:
        name = label(item["candidate_id"])
        b = item["built"]
        built[name] = (item["config"], CompiledKernel(Path(b["directory"]), b.get("files", {}), b.get("report", {})))
        configs[name] = {"candidate_id": item["candidate_id"], "values": {}, "units": {}, "environments": []}

    started = time.perf_counter()
    for name, (config, compiled) in built.items():
        write_whole(jobdir / PHASE_FILE, f"check {name}")
        _check(backend, check_kernel, config, compiled, configs[name])
        save_progress(jobdir, partial)
    partial["timings"]["check_s"] = time.perf_counter() - started

    # a wrong candidate is not measured (it cannot be approved); the baseline always is
    measured = [n for n in built if n == BASELINE or configs[n].get("correct")]
    started = time.perf_counter()
    for round_index in range(spec.rounds):
        round_started = time.perf_counter()
        order = [measured[i] for i in round_order(len(measured), round_index)]
        for name in order:
            write_whole(jobdir / PHASE_FILE, f"round {round_index + 1}/{spec.rounds}: {name}")
            config, compiled = built[name]
            if not _measure(backend, spec, config, compiled, configs[name], jobdir):
                measured.remove(name)
        if BASELINE not in measured:
            break  # nothing left to compare with
        partial["order"].append([configs[n]["candidate_id"] for n in order])
        partial["rounds"] = round_index + 1
        partial["round_s"].append(time.perf_counter() - round_started)
        write_whole(jobdir / ROUNDS_FILE, json.dumps(partial["round_s"]))
        save_progress(jobdir, partial)
    write_whole(jobdir / PHASE_FILE, f"measured {partial['rounds']} rounds")  # the agent reads the last round
    partial["timings"]["measure_s"] = time.perf_counter() - started
    partial["target"] = _target(spec)
    return dict(partial)


def _target(spec: ValidationSpec) -> dict[str, Any] | None:
    try:
        from workers.runtime.detect import compile_target, detect_target

        target = compile_target(spec.kernel) if spec.compile_only else detect_target(spec.kernel.backend)
        return target.model_dump(mode="json")
    except Exception:  # the target is information; a broken probe must not fail the job
        return None
