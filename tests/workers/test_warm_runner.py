"""Warm runners: one sandbox process serves trial after trial, and is replaced after any
trial that did not end cleanly, through real processes (python and cpu backends)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import PLANTED, cpu_source_kernel, make_spec, process_alive, python_kernel
from worker_plane import Plane, PlaneServer

from wire.contract import FailureReason
from workers.agent.launch import run_agent
from workers.agent.loop import Agent
from workers.agent.settings import AgentSettings, parse_cpus
from workers.sandbox.context import Context
from workers.sandbox.runner import RunnerPool
from workers.sandbox.sandbox import Sandbox, default_sandbox
from workers.sandbox.stages import compile_trial, execute_trial


@pytest.fixture
def pool(tmp_path: Path):
    runners = RunnerPool(tmp_path / "runners", warm_for=lambda backend: True)
    yield runners
    runners.close()


@pytest.fixture
def warm(cache, pool) -> Context:
    return Context(cache, runners=pool)


def whoami(warm: Context, tag: str = ""):
    spec = make_spec(python_kernel("whoami"), {"x": 0.5, "tag": tag}, objectives=["f1"])
    result = execute_trial(spec, warm)
    assert result is not None and result.status == "completed", result and (result.message + result.log)
    return int(result.metrics["pid"].value), int(result.metrics["calls"].value), result


def test_one_runner_process_serves_several_trials(warm, pool):
    pids, calls = [], []
    for i in range(4):
        pid, count, result = whoami(warm, tag=str(i))
        pids.append(pid)
        calls.append(count)
        assert result.environment["sandbox"]["warm"] is True
        assert result.environment["sandbox"]["pid"] == pid
        assert f"trial output {i}" in result.log  # this trial's output, not the others'
        assert f"trial output {i - 1}" not in result.log
    assert len(set(pids)) == 1 and pids[0] != os.getpid()
    assert calls == [1, 2, 3, 4]  # the same interpreter: state (imports) stays warm
    assert pool.started == 1


def test_cpu_kernels_compile_and_run_in_warm_runners(warm):
    results = [
        execute_trial(make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": opt}), warm)
        for opt in ("-O1", "-O2", "-O3")
    ]
    assert all(r.status == "completed" for r in results), [r.message + r.log for r in results]
    run_pids = {r.environment["sandbox"]["pid"] for r in results}
    compile_pids = {r.compile_report["sandbox"]["pid"] for r in results}
    assert len(run_pids) == 1 and len(compile_pids) == 1 and run_pids != compile_pids
    assert [r.environment["sandbox"]["trials_served"] for r in results] == [1, 2, 3]
    # each runner's warm-up prepared its own phase (a Triton compile runner pays the first compile)
    assert {r.compile_report["sandbox"]["warmed_up_for"] for r in results} == {"compile"}
    assert {r.environment["sandbox"]["warmed_up_for"] for r in results} == {"run"}


def test_a_crash_fails_only_its_trial_and_the_next_gets_a_new_runner(warm):
    before, _, _ = whoami(warm, tag="before")
    crashed = execute_trial(make_spec(python_kernel("segfault"), objectives=["f1"]), warm)
    assert crashed.failure_reason == FailureReason.CRASH
    assert "SIGSEGV" in crashed.message
    assert "about to read address 0" in crashed.log
    assert "trial output before" not in crashed.log  # only the crashed trial's output
    assert not process_alive(before)
    after, calls, _ = whoami(warm, tag="after")
    assert after != before and calls == 1


def test_a_segfaulting_c_kernel_in_a_warm_runner_is_a_crash(warm):
    result = execute_trial(make_spec(cpu_source_kernel(PLANTED["segfault"])), warm)
    assert result.failure_reason == FailureReason.CRASH
    assert "SIGSEGV" in result.message
    good = execute_trial(make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O2"}), warm)
    assert good.status == "completed", good.message + good.log


def test_a_hang_is_killed_at_the_run_timeout(warm):
    before, _, _ = whoami(warm)
    spec = make_spec(python_kernel("sleepy"), {"sleep_s": 60}, objectives=["f1"], run_timeout_s=1.5)
    started = time.monotonic()
    result = execute_trial(spec, warm)
    assert result.failure_reason == FailureReason.TIMEOUT
    assert "run_timeout_s=1.5" in result.message
    assert 1.5 <= time.monotonic() - started < 10
    assert not process_alive(before)
    after, calls, _ = whoami(warm)
    assert after != before and calls == 1


def test_a_hanging_c_kernel_is_killed_at_the_run_timeout(warm):
    spec = make_spec(cpu_source_kernel(PLANTED["hang"]), run_timeout_s=1.5)
    started = time.monotonic()
    result = execute_trial(spec, warm)
    assert result.failure_reason == FailureReason.TIMEOUT
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("planted", ["raises", "exits", "missing_metric"])
def test_any_failed_trial_replaces_the_runner(warm, planted):
    before, _, _ = whoami(warm)
    failed = execute_trial(make_spec(python_kernel(planted), objectives=["f1"]), warm)
    assert failed.status == "failed"
    expected = FailureReason.CRASH if planted == "exits" else FailureReason.ERROR
    assert failed.failure_reason == expected, failed.message
    after, calls, _ = whoami(warm)
    assert after != before and calls == 1


def test_wrong_result_replaces_the_runner_and_keeps_its_reason(warm):
    good = execute_trial(make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O1"}), warm)
    wrong = execute_trial(make_spec(cpu_source_kernel(PLANTED["wrong"])), warm)
    assert wrong.failure_reason == FailureReason.WRONG_RESULT
    assert wrong.correctness["passed"] is False
    again = execute_trial(make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O3"}), warm)
    assert again.status == "completed"
    assert wrong.environment["sandbox"]["pid"] == good.environment["sandbox"]["pid"]
    assert again.environment["sandbox"]["pid"] != wrong.environment["sandbox"]["pid"]


def test_a_compile_error_keeps_the_compile_runner(warm):
    broken = compile_trial(make_spec(cpu_source_kernel(PLANTED["compile_error"])), warm)
    assert broken.failure is not None and broken.failure.failure_reason == FailureReason.COMPILE_ERROR
    assert "error" in broken.failure.log and "kernel.c" in broken.failure.log
    fine = compile_trial(make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O2"}), warm)
    assert fine.failure is None
    assert fine.sandbox["pid"] == broken.sandbox["pid"]


def test_processes_a_trial_leaves_behind_are_killed(warm, tmp_path):
    pid_file = tmp_path / "child.pid"
    spec = make_spec(python_kernel("leave_child"), {"pid_file": str(pid_file)}, objectives=["f1"])
    assert execute_trial(spec, warm).status == "completed"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child)


def test_a_runner_that_cannot_start_fails_the_trial_as_a_crash(cache, tmp_path):
    no_stdlib = {"PYTHONHOME": str(tmp_path / "nowhere")}  # the runner cannot start Python
    broken_env = default_sandbox().env(None, home="/tmp", overrides=no_stdlib)
    runners = RunnerPool(tmp_path / "runners", env_for=lambda phase: broken_env, warm_for=lambda backend: True)
    try:
        spec = make_spec(python_kernel("tradeoff"), {"x": 0.1}, objectives=["f1"])
        result = execute_trial(spec, Context(cache, runners=runners))
    finally:
        runners.close()
    assert result.failure_reason == FailureReason.CRASH
    assert "while starting" in result.message
    assert "encodings" in result.log or "Fatal Python error" in result.log


def test_cancel_kills_a_running_warm_trial(warm):
    import threading

    cancel = threading.Event()
    spec = make_spec(python_kernel("sleepy"), {"sleep_s": 60}, objectives=["f1"], run_timeout_s=120)
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    assert execute_trial(spec, warm.for_work(cancel)) is None
    assert time.monotonic() - started < 10
    assert whoami(warm)[1] == 1


def test_gpu_backends_are_warm_by_default_and_cpu_ones_are_not(tmp_path):
    agent = Agent(AgentSettings(server="http://127.0.0.1:1", token="t", cache_dir=tmp_path / "cache"))
    assert agent._warm_for("triton") and agent._warm_for("cuda")
    assert not agent._warm_for("cpu") and not agent._warm_for("python")
    forced = Agent(AgentSettings(server="http://127.0.0.1:1", token="t", cache_dir=tmp_path / "c2", warm_runner=False))
    assert not forced._warm_for("triton")


def test_agent_with_warm_runners_serves_failures_and_stays_up(tmp_path):
    specs = {
        "first": make_spec(python_kernel("whoami"), {"x": 0.1}, objectives=["f1"]),
        "second": make_spec(python_kernel("whoami"), {"x": 0.2}, objectives=["f1"]),
        "segfault": make_spec(python_kernel("segfault"), objectives=["f1"]),
        "hang": make_spec(python_kernel("sleepy"), {"sleep_s": 60}, objectives=["f1"], run_timeout_s=1.5),
        "third": make_spec(python_kernel("whoami"), {"x": 0.3}, objectives=["f1"]),
        "c_good": make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O2"}),
    }
    plane = Plane(heartbeat_s=0.2, lease_s=5)
    plane.add(*specs.values())
    config = AgentSettings(
        server="",
        token=plane.token,
        cache_dir=tmp_path / "cache",
        work_dir=tmp_path / "work",
        wait_s=0.2,
        max_trials=len(specs),
        warm_runner=True,
        gpu=3,
    )
    with PlaneServer(plane) as server:
        config.server = server.url
        summary = run_agent(config)
    results = {name: plane.results[spec.trial_id] for name, spec in specs.items()}
    assert results["segfault"].failure_reason == FailureReason.CRASH
    assert results["hang"].failure_reason == FailureReason.TIMEOUT
    assert results["c_good"].status == "completed"
    runner = {name: results[name].metrics["process"].value for name in ("first", "second", "third")}
    assert runner["first"] == runner["second"] != runner["third"]
    assert [results[n].metrics["calls"].value for n in ("first", "second", "third")] == [1, 2, 1]
    assert summary.completed == 4 and summary.failed == 2
    assert plane.registered[0]["fingerprint"]["gpu_index"] == 3
    assert not list((tmp_path / "work" / "runners").glob("*"))  # closed with the agent


@pytest.mark.parametrize("warm_runner", [False, True])
def test_gpu_option_sets_the_sandboxes_visible_devices(tmp_path, warm_runner):
    spec = make_spec(python_kernel("visible_devices"), objectives=["f1"])
    plane = Plane()
    plane.add(spec)
    with PlaneServer(plane) as server:
        config = AgentSettings(
            server=server.url,
            token=plane.token,
            cache_dir=tmp_path / "cache",
            wait_s=0.2,
            max_trials=1,
            warm_runner=warm_runner,
            gpu=2,
        )
        run_agent(config)
    assert plane.results[spec.trial_id].metrics["f1"].value == 2


def test_a_runner_outlives_the_thread_that_asked_for_it(warm, pool):
    import threading

    got = {}

    def ask() -> None:
        got["runner"] = pool.get("run", "python")
        while got["runner"].ready_info() is None:  # it has set up dying with its parent
            time.sleep(0.02)
        pool.release(got["runner"])

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join()
    time.sleep(0.5)  # a sandbox dies with the thread that started it, if that were the asker
    assert got["runner"].alive()
    pid, calls, _ = whoami(warm)
    assert pid == got["runner"].pid and calls == 1


def test_cpu_lists_parse_like_taskset():
    assert parse_cpus("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpus("5") == [5]
    assert AgentSettings(measure_cpus=" ", compile_cpus="2-3").measure_cpus is None
    assert AgentSettings(compile_cpus="2-3,1").compile_cpus == [2, 3, 1]
    for bad in ("a-b", "4-2"):
        with pytest.raises(Exception, match="CPU list|backwards"):
            parse_cpus(bad)


def test_a_runner_in_use_is_never_handed_out_twice(pool):
    """Several compilers each get a runner of their own; a released one serves the next."""
    first = pool.get("compile", "python", 1)
    second = pool.get("compile", "python", 1)
    assert first is not None and second is not None and first is not second
    assert first.alive() and second.alive()
    pool.release(first)
    assert pool.get("compile", "python", 1) is first
    pool.release(first)
    pool.release(second)
    again = pool.get("compile", "python", 2)  # another study: a runner of its own
    assert again not in (first, second)
    # without namespaces the runners of a phase share its uid: the other study's idle ones go
    assert not first.alive() and not second.alive() and again.alive()
    assert len(pool.runners[("compile", "python")]) == 1 and len(pool.runners[("run", "python")]) == 1



def test_a_context_runs_its_warm_runners_in_its_own_sandbox(cache, pool, tmp_path):
    import threading

    other = Sandbox(work_root=tmp_path / "other")
    try:
        with pytest.raises(ValueError, match="another sandbox"):
            Context(cache, sandbox=other, runners=pool)
    finally:
        other.close()
    cancel = threading.Event()
    held = Context(cache, runners=pool, compile_cpus=[0], run_cpus=[1]).for_work(cancel, print)
    assert (held.cancel, held.on_phase, held.runners, held.sandbox) == (cancel, print, pool, pool.sandbox)
    assert (held.cpus("compile"), held.cpus("run")) == ([0], [1])
