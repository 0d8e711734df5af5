"""Planted kernels fail only their own trial, with the right reason and a log excerpt,
through real sandbox processes and the real system compiler."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import PLANTED, cpu_source_kernel, make_spec, python_kernel

from wire.contract import FailureReason
from workers.sandbox.context import Context
from workers.sandbox.stages import compile_trial, execute_trial


def test_segfault_is_a_crash_named_by_its_signal(cache):
    result = execute_trial(make_spec(cpu_source_kernel(PLANTED["segfault"])), Context(cache))
    assert result.status == "failed"
    assert result.failure_reason == FailureReason.CRASH
    assert "SIGSEGV" in result.message
    assert "Fatal Python error" in result.log or "Segmentation fault" in result.log


def test_hang_times_out_and_is_killed(cache):
    spec = make_spec(cpu_source_kernel(PLANTED["hang"]), run_timeout_s=1.5)
    started = time.monotonic()
    result = execute_trial(spec, Context(cache))
    assert result.failure_reason == FailureReason.TIMEOUT
    assert "run_timeout_s=1.5" in result.message
    assert time.monotonic() - started < 10


def test_compile_error_carries_the_compiler_output(cache):
    result = execute_trial(make_spec(cpu_source_kernel(PLANTED["compile_error"])), Context(cache))
    assert result.failure_reason == FailureReason.COMPILE_ERROR
    assert "error" in result.log and "kernel.c" in result.log
    assert not cache.entries()  # a failed build leaves nothing in the cache


def test_wrong_result_is_caught_by_the_reference_check(cache):
    result = execute_trial(make_spec(cpu_source_kernel(PLANTED["wrong"])), Context(cache))
    assert result.failure_reason == FailureReason.WRONG_RESULT
    assert result.correctness["passed"] is False
    assert result.correctness["rel_err"] > result.correctness["tolerance"]


def test_good_kernel_after_bad_ones_completes(cache):
    for name in ("segfault", "wrong"):
        assert execute_trial(make_spec(cpu_source_kernel(PLANTED[name])), Context(cache)).status == "failed"
    result = execute_trial(
        make_spec(cpu_source_kernel(PLANTED["good"]), objectives=["runtime_ms", "p99_ms", "compile_s"]), Context(cache)
    )
    assert result.status == "completed", result.message + result.log
    runtime = result.metrics["runtime_ms"]
    assert runtime.value > 0 and runtime.ci_low <= runtime.value <= runtime.ci_high
    assert result.metrics["p99_ms"].value >= 0
    assert result.metrics["compile_s"].value > 0
    assert result.correctness["passed"] is True


def test_compile_timeout_kills_the_compiler(cache, tmp_path: Path):
    # a translation unit that takes the compiler far longer than the limit
    heavy = "#define A(x) x x x x x x x x\n" + "int f(void){return 0;}\n"
    heavy += "static const int v[] = {" + ",".join(str(i) for i in range(400_000)) + "};\n"
    heavy += "int matmul(void){return v[3];}\n"
    spec = make_spec(cpu_source_kernel(heavy), {"opt": "-O3"}, compile_timeout_s=0.3)
    stage = compile_trial(spec, Context(cache))
    assert stage.failure is not None
    assert stage.failure.failure_reason == FailureReason.TIMEOUT
    assert "compile_timeout_s=0.3" in stage.failure.message


def test_python_objective_exception_is_an_error_with_traceback(cache):
    result = execute_trial(make_spec(python_kernel("raises"), {"x": 1}, objectives=["f1"]), Context(cache))
    assert result.failure_reason == FailureReason.ERROR
    assert "ValueError" in result.message
    assert "Traceback" in result.log and "in raises" in result.log  # the inline source's frame


def test_python_objective_segfault_is_a_crash(cache):
    result = execute_trial(make_spec(python_kernel("segfault"), objectives=["f1"]), Context(cache))
    assert result.failure_reason == FailureReason.CRASH
    assert "SIGSEGV" in result.message
    assert "about to read address 0" in result.log


def test_python_objective_exit_is_a_crash(cache):
    result = execute_trial(make_spec(python_kernel("exits"), objectives=["f1"]), Context(cache))
    assert result.failure_reason == FailureReason.CRASH
    assert "status 3" in result.message


def test_timeout_kills_the_whole_process_group(cache, tmp_path: Path):
    pid_file = tmp_path / "grandchild.pid"
    spec = make_spec(python_kernel("hang_with_child"), {"pid_file": str(pid_file)}, objectives=["f1"], run_timeout_s=2)
    result = execute_trial(spec, Context(cache))
    assert result.failure_reason == FailureReason.TIMEOUT
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_python_objective_metrics(cache):
    spec = make_spec(python_kernel("tradeoff"), {"x": 0.25}, objectives=["f1", "f2", "runtime_ms", "power_w"])
    result = execute_trial(spec, Context(cache))
    assert result.status == "completed", result.message + result.log
    assert result.metrics["f1"].value == 0.25
    assert result.metrics["f2"].value == 0.5
    assert result.metrics["runtime_ms"].value == 1.25 and result.metrics["runtime_ms"].n == 3
    assert result.metrics["power_w"].unit == "W"


def test_python_objective_missing_metric(cache):
    result = execute_trial(make_spec(python_kernel("missing_metric"), objectives=["f1"]), Context(cache))
    assert result.failure_reason == FailureReason.ERROR
    assert "f1" in result.message


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one reaped yet counts as dead
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
