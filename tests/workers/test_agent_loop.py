"""The agent end to end against a minimal real HTTP control plane (tests/workers/
worker_plane.py): planted failures, pipelining, heartbeats, cancel, retries, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PLANTED, cpu_source_kernel, make_spec, process_alive, python_kernel
from helpers import wait_for
from worker_plane import Plane, PlaneServer

from wire.contract import FailureReason
from workers.agent.launch import run_agent, start_agent_thread
from workers.agent.settings import AgentSettings

REPO = Path(__file__).resolve().parents[2]


def _config(server: PlaneServer, tmp_path: Path, **kw) -> AgentSettings:
    base = dict(
        server=server.url, token=server.plane.token, cache_dir=tmp_path / "cache", wait_s=0.2, name="test-worker"
    )
    return AgentSettings(**{**base, **kw})


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_one_agent_serves_every_planted_failure_and_keeps_going(tmp_path, warm):
    specs = {
        "segfault": make_spec(cpu_source_kernel(PLANTED["segfault"])),
        "hang": make_spec(cpu_source_kernel(PLANTED["hang"]), run_timeout_s=1.5),
        "compile_error": make_spec(cpu_source_kernel(PLANTED["compile_error"])),
        "wrong": make_spec(cpu_source_kernel(PLANTED["wrong"])),
        "python_error": make_spec(python_kernel("raises"), objectives=["f1"]),
        "good": make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O2"}),
        "good_again": make_spec(cpu_source_kernel(PLANTED["good"]), {"opt": "-O2"}),
    }
    plane = Plane(heartbeat_s=0.2, lease_s=5)
    plane.add(*specs.values())
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=len(specs), warm_runner=warm))
    results = {name: plane.results[spec.trial_id] for name, spec in specs.items()}
    expected = {
        "segfault": FailureReason.CRASH,
        "hang": FailureReason.TIMEOUT,
        "compile_error": FailureReason.COMPILE_ERROR,
        "wrong": FailureReason.WRONG_RESULT,
        "python_error": FailureReason.ERROR,
    }
    for name, reason in expected.items():
        assert results[name].status == "failed"
        assert results[name].failure_reason == reason, (name, results[name].message)
        assert results[name].log or name == "hang"
    assert "SIGSEGV" in results["segfault"].message
    assert results["good"].status == "completed"
    assert results["good_again"].compile_report["cached"] is True
    assert summary.completed == 2 and summary.failed == 5 and summary.leased == 7
    registered = plane.registered[0]
    assert {"cpu", "python"} <= set(registered["fingerprint"]["backends"])
    phases = {phase for _, _, phase in plane.heartbeats}
    assert phases & {"compile", "compiled", "check", "measure"}  # heartbeats show what the trial is doing
    assert not plane.expired


def test_prefetch_leases_ahead_but_never_overlaps_measurements(tmp_path):
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 0.4, "tag": str(i)}, objectives=["f1"]) for i in range(4)]
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        run_agent(_config(server, tmp_path, max_trials=4, prefetch=True))
    metrics = [plane.results[s.trial_id].metrics for s in specs]
    intervals = sorted((m["started"].value, m["ended"].value) for m in metrics)
    assert len(intervals) == 4
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert start >= end  # measurements strictly one after another
    lease_times = {trial: t for t, trial, _ in plane.leased}
    posted = {trial: t for t, trial, _ in plane.result_posts}
    ids = [s.trial_id for s in specs]
    # trial N+1 was leased while trial N was still running: two leases held at once
    assert any(lease_times[b] < posted[a] for a, b in zip(ids, ids[1:], strict=False))
    held_ids = {trial for _, trial, _ in plane.heartbeats}
    assert len(held_ids) >= 3
    assert not plane.handed  # the leaser holds the next lease already: a result asks for none


def test_lease_ahead_holds_that_many_compiled_trials_beyond_the_one_measuring(tmp_path):
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 0.4, "tag": str(i)}, objectives=["f1"]) for i in range(6)]
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=6, prefetch=True, lease_ahead=2))
    assert summary.completed == 6
    events = sorted([(t, 1) for t, _, _ in plane.leased] + [(t, -1) for t, _, _ in plane.result_posts])
    held, most = 0, 0
    for _, change in events:
        held += change
        most = max(most, held)
    assert most == 3  # the trial measuring and two more, never a fourth


def test_a_full_stage_measures_before_the_screens_leased_ahead_of_it(tmp_path):
    """A promoted trial's full stage goes before the screens already compiled and waiting
    (its study's front, and the screens deferred for it, hang on it); the rest keep their
    lease order."""
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 1.0 if i == 0 else 0.2, "tag": str(i)},
                       objectives=["f1"]) for i in range(4)]  # the others are leased while the first measures
    specs[3] = specs[3].model_copy(update={"stage": "full"})
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=4, prefetch=True, lease_ahead=3))
    assert summary.completed == 4
    started = {s.trial_id: plane.results[s.trial_id].metrics["started"].value for s in specs}
    leased = [trial for _, trial, _ in sorted(plane.leased)]
    assert leased == [s.trial_id for s in specs]
    measured = sorted(started, key=started.get)
    # the first was measuring when the others came; the full stage, leased last, went next
    assert measured == [specs[0].trial_id, specs[3].trial_id, specs[1].trial_id, specs[2].trial_id]


def slow_to_compile(tag: int, functions: int = 600) -> str:
    """A correct matmul whose file takes gcc -O2 a good fraction of a second (a tag makes
    every copy a different build)."""
    helpers = "\n".join(
        f"static float f{i}(float x) {{ for (int k = 0; k < {i % 7 + 3}; k++) x = x * 1.0001f + {i}.0f / (x + 1.0f);"
        f" return x; }}" for i in range(functions))
    used = " + ".join(f"f{i}(s)" for i in range(functions))
    return f"/* {tag} */\n{helpers}\nfloat used(float s) {{ return {used}; }}\n{PLANTED['good']}"


@pytest.mark.parametrize("compilers", [1, 2])
def test_compilers_compile_that_many_trials_at_once_each_in_its_own_process(tmp_path, compilers):
    specs = [make_spec(cpu_source_kernel(slow_to_compile(i))) for i in range(4)]
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=4, prefetch=True, lease_ahead=2,
                                    compilers=compilers, warm_runner=True))
    assert summary.completed == 4
    results = [plane.results[s.trial_id] for s in specs]
    compile_runners = {r.compile_report["sandbox"]["runner"] for r in results}
    leased_at = {trial: t for t, trial, _ in plane.leased}
    compiling = sorted((leased_at[s.trial_id], leased_at[s.trial_id] + r.timings["compile_wall_s"])
                       for s, r in zip(specs, results, strict=True))
    overlapping = sum(start < end for (_, end), (start, _) in zip(compiling, compiling[1:], strict=False))
    assert len(compile_runners) == compilers
    assert (overlapping > 0) == (compilers > 1)
    events = sorted([(t, 1) for t, _, _ in plane.leased] + [(t, -1) for t, _, _ in plane.result_posts])
    held = [sum(change for _, change in events[: n + 1]) for n in range(len(events))]
    assert max(held) <= 3  # compiling at once never holds more than 1 + lease_ahead


def test_without_prefetch_one_lease_at_a_time(tmp_path):
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 0.2}, objectives=["f1"]) for _ in range(3)]
    plane = Plane()
    plane.add(*specs)
    with PlaneServer(plane) as server:
        run_agent(_config(server, tmp_path, max_trials=3, prefetch=False))
    lease_times = [t for t, _, _ in plane.leased]
    post_times = [t for t, _, _ in plane.result_posts]
    assert len(post_times) == 3
    for posted, next_lease in zip(post_times, lease_times[1:], strict=False):
        assert next_lease >= posted
    # the second and third came with the results before them, not from long-polls
    assert plane.handed == [s.trial_id for s in specs[1:]]
    assert [plane.results[s.trial_id].status for s in specs] == ["completed"] * 3


def test_without_prefetch_the_agent_long_polls_when_no_lease_comes_with_the_result(tmp_path):
    """A service that hands out nothing with a result (an older one, or an empty queue):
    the agent long-polls for each trial as before."""
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 0.1}, objectives=["f1"]) for _ in range(3)]
    plane = Plane(hand_next=False)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=3, prefetch=False))
    assert summary.completed == 3 and not plane.handed and len(plane.leased) == 3


def test_cancel_kills_the_trial_and_the_agent_goes_on(tmp_path):
    hang = make_spec(cpu_source_kernel(PLANTED["hang"]), run_timeout_s=60)
    after = make_spec(python_kernel("tradeoff"), {"x": 0.5}, objectives=["f1"])
    plane = Plane(heartbeat_s=0.2)
    plane.cancel_trials.add(hang.trial_id)
    plane.add(hang, after)
    started = time.monotonic()
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=2))
    assert time.monotonic() - started < 30
    assert hang.trial_id not in plane.results  # abandoned: no result
    assert plane.results[after.trial_id].status == "completed"
    assert summary.abandoned == 1 and summary.completed == 1


def test_lost_lease_is_abandoned(tmp_path):
    spec = make_spec(python_kernel("sleepy"), {"sleep_s": 30}, objectives=["f1"], run_timeout_s=60)
    plane = Plane(heartbeat_s=0.2)
    plane.add(spec)
    with PlaneServer(plane) as server:
        handle = start_agent_thread(_config(server, tmp_path, max_trials=1))
        deadline = time.monotonic() + 20
        while not plane.heartbeats and time.monotonic() < deadline:
            time.sleep(0.05)
        with plane.cond:
            plane.leases.clear()  # the service forgot the lease: next heartbeat gets 409
        handle.thread.join(20)
    assert not handle.thread.is_alive()
    assert handle.summary.abandoned == 1 and not plane.results


def test_result_is_retried_through_server_errors(tmp_path):
    spec = make_spec(python_kernel("tradeoff"), {"x": 0.1}, objectives=["f1"])
    plane = Plane(fail_result_posts=3)
    plane.add(spec)
    with PlaneServer(plane) as server:
        summary = run_agent(_config(server, tmp_path, max_trials=1))
    assert plane.results[spec.trial_id].status == "completed"
    assert summary.completed == 1 and plane.fail_result_posts == 0


def test_stop_event_drains_held_trials(tmp_path):
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 1.0}, objectives=["f1"]) for _ in range(5)]
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        handle = start_agent_thread(_config(server, tmp_path))
        while not plane.heartbeats:
            time.sleep(0.05)
        summary = handle.stop(timeout=30)
    assert summary is not None and summary.leased in (1, 2)
    assert len(plane.results) == summary.leased  # every held trial was finished and posted
    assert len(plane.queue) == len(specs) - summary.leased


@pytest.mark.parametrize("prefetch", [False, True], ids=["one-leaser", "two-leasers"])
def test_an_idle_agent_stops_without_waiting_out_its_long_polls(tmp_path, prefetch, caplog):
    plane = Plane(heartbeat_s=0.2, lease_s=2)
    with PlaneServer(plane) as server:
        handle = start_agent_thread(_config(server, tmp_path, wait_s=20, prefetch=prefetch, lease_ahead=2,
                                            compilers=2))
        wait_for(lambda: plane.registered, 30, "the agent to register")
        time.sleep(0.5)  # its leasers long-poll the empty queue
        started = time.monotonic()
        summary = handle.stop(timeout=30)
        stopped_s = time.monotonic() - started
        spec = make_spec(python_kernel("tradeoff"), {"x": 0.1}, objectives=["f1"])
        plane.add(spec)  # queued while a poll may still wait: whatever leases it, it is not run
        time.sleep(1.0)
    assert summary is not None and summary.error is None and summary.leased == 0
    assert stopped_s < 5, stopped_s  # not the 20 s of its long-polls
    assert not plane.results and not plane.heartbeats
    assert "the leaser failed" not in caplog.text


def test_bad_token_stops_the_agent_with_an_error(tmp_path):
    with PlaneServer(Plane()) as server:
        config = _config(server, tmp_path)
        config.token = "wrong"
        with pytest.raises(Exception, match="refused"):
            run_agent(config)


def _start_worker_process(server: PlaneServer, tmp_path: Path, *extra: str) -> subprocess.Popen:
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workers",
            "--server",
            server.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--name",
            "proc",
            *extra,
        ],
        env={**os.environ, "PARETUNE_WORKER_TOKEN": server.plane.token},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_sigterm_finishes_the_held_trial_then_exits(tmp_path):
    specs = [make_spec(python_kernel("sleepy"), {"sleep_s": 1.5}, objectives=["f1"]) for _ in range(4)]
    plane = Plane(heartbeat_s=0.2)
    plane.add(*specs)
    with PlaneServer(plane) as server:
        proc = _start_worker_process(server, tmp_path)
        try:
            wait_for(lambda: any(phase == "measure" for _, _, phase in plane.heartbeats), 30,
                     "a heartbeat in the measure phase")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    leased = {trial for _, trial, _ in plane.leased}
    assert set(plane.results) == leased  # what it held was finished and reported
    assert len(plane.queue) == len(specs) - len(leased) >= 2
    log = (tmp_path / "worker.log").read_text()
    assert "draining" in log and "completed" in log


def test_second_sigterm_aborts_and_the_lease_expires(tmp_path):
    spec = make_spec(python_kernel("sleepy"), {"sleep_s": 60}, objectives=["f1"], run_timeout_s=120)
    plane = Plane(heartbeat_s=0.2, lease_s=1.5)
    plane.add(spec)
    with PlaneServer(plane) as server:
        proc = _start_worker_process(server, tmp_path)
        try:
            wait_for(lambda: any(phase == "measure" for _, _, phase in plane.heartbeats), 30,
                     "a heartbeat in the measure phase")
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wait_for(lambda: plane.lease(worker_id=1, wait_s=0.1) is not None, 10, "the handed-back trial to be leasable")
    assert spec.trial_id in plane.expired and not plane.results


def test_agent_registers_again_when_the_service_forgot_it(tmp_path):
    first = make_spec(python_kernel("tradeoff"), {"x": 0.1}, objectives=["f1"])
    second = make_spec(python_kernel("tradeoff"), {"x": 0.2}, objectives=["f1"])
    plane = Plane()
    plane.add(first)
    with PlaneServer(plane) as server:
        handle = start_agent_thread(_config(server, tmp_path, max_trials=2))
        wait_for(lambda: first.trial_id in plane.results, 30, "the first trial's result")
        plane.known_workers.clear()  # as after a restore of the service's database
        time.sleep(0.6)  # let the long-poll already in flight (wait_s=0.2) end
        plane.add(second)
        handle.thread.join(30)
    assert len(plane.registered) == 2
    assert plane.results[second.trial_id].status == "completed"


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("isolation", ["namespaces", "none"])
@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_sandbox_dies_with_a_killed_agent(tmp_path, warm, isolation):
    spec = make_spec(python_kernel("sleepy"), {"sleep_s": 60}, objectives=["f1"], run_timeout_s=120)
    plane = Plane(heartbeat_s=0.2)
    plane.add(spec)
    with PlaneServer(plane) as server:
        proc = _start_worker_process(server, tmp_path, "--warm" if warm else "--no-warm", "--isolation", isolation)
        try:
            wait_for(lambda: any(phase == "measure" for _, _, phase in plane.heartbeats), 30,
                     "a heartbeat in the measure phase")
            sandbox = _descendants(proc.pid)  # bwrap, the sandbox process, its children
            assert sandbox
            proc.kill()
            proc.wait(timeout=10)
            wait_for(lambda: not any(process_alive(pid) for pid in sandbox), 5, "the sandbox to die with the agent")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

