"""The parts of trial isolation, each through the real thing it relies on (files, processes,
bubblewrap, setpriv): the artifact cache's verification, the environment allow-list, the
limits and their messages, the sweeps that kill what a trial leaves, sandbox uids, the
token's ways into the agent, and which directories a python objective may import from."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import typer
from helpers import wait_for

from wire.contract import KernelSpec, SandboxLimits
from workers.backends.base import CompiledKernel
from workers.cache import ArtifactCache
from workers.cli import resolve_token
from workers.sandbox import limits as isolation_limits
from workers.sandbox.files import UnsafeFile, remove_tree
from workers.sandbox.isolation import IsolationUnavailable, choose, reserve_uids, sandbox_env
from workers.sandbox.procs import descendants, kill_uid, processes_of_uid
from workers.sandbox.sandbox import Sandbox

KEY = "cd" + "1" * 62
REPO = Path(__file__).resolve().parents[2]


def _build(cache: ArtifactCache, payload: bytes = b"library") -> CompiledKernel:
    staging = cache.staging()
    (staging / "kernel.so").write_bytes(payload)
    (staging / "sub").mkdir()
    (staging / "sub" / "data.json").write_text("{}")
    return CompiledKernel(staging, {"library": "kernel.so"}, {"compile_s": 0.1}, "")


# -- the artifact cache ------------------------------------------------------------------------


def test_an_entry_is_used_only_while_every_byte_matches_its_signed_manifest(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0  # no other user looks inside
    assert (tmp_path / "cache" / ".key").stat().st_mode & 0o077 == 0
    entry = cache.commit(KEY, _build(cache)).directory
    copy = cache.checkout(KEY, tmp_path / "copy")
    assert copy is not None and (copy.directory / "kernel.so").read_bytes() == b"library"
    assert (copy.directory / "sub" / "data.json").read_text() == "{}"

    (entry / "kernel.so").write_bytes(b"libraryX")  # a changed file
    assert cache.checkout(KEY, tmp_path / "copy2") is None
    assert not entry.exists()  # discarded, to be rebuilt

    cache.commit(KEY, _build(cache))
    manifest = json.loads((entry / "artifact.json").read_text())
    (entry / "kernel.so").write_bytes(b"evil")
    manifest["sha256"]["kernel.so"] = hashlib.sha256(b"evil").hexdigest()  # forged without the key
    (entry / "artifact.json").write_text(json.dumps(manifest))
    assert cache.lookup(KEY) is None and not entry.exists()

    other = "ef" + "2" * 62
    cache.commit(other, _build(cache))
    cache.commit(KEY, _build(cache))
    foreign_manifest = (cache.path_for(other) / "artifact.json").read_text()
    (entry / "artifact.json").write_text(foreign_manifest)  # a genuine manifest of another key
    assert cache.lookup(KEY) is None
    assert cache.lookup(other) is not None


def test_another_cache_key_does_not_verify_this_caches_entries(tmp_path):
    first = ArtifactCache(tmp_path / "a")
    first.commit(KEY, _build(first))
    second = ArtifactCache(tmp_path / "b")
    target = second.path_for(KEY)
    target.parent.mkdir(parents=True)
    os.rename(first.path_for(KEY), target)  # signed, but with the other cache's key
    assert second.lookup(KEY) is None


@pytest.mark.parametrize("plant", ["symlink", "fifo", "listed_but_missing"])
def test_a_build_with_links_or_special_files_never_enters_the_cache(tmp_path, plant):
    cache = ArtifactCache(tmp_path / "cache")
    secret = tmp_path / "secret.token"
    secret.write_text("ptw_secret")
    build = tmp_path / "build"
    build.mkdir()
    (build / "kernel.so").write_bytes(b"ok")
    files = {"library": "kernel.so"}
    if plant == "symlink":
        (build / "leak.txt").symlink_to(secret)
    elif plant == "fifo":
        os.mkfifo(build / "pipe")
    else:
        files["extra"] = "not-there.so"
    with pytest.raises(UnsafeFile):
        cache.commit(KEY, CompiledKernel(build, files, {}, ""))
    assert cache.lookup(KEY) is None
    assert not any("ptw_secret" in p.read_text(errors="ignore") for p in (tmp_path / "cache").rglob("*")
                   if p.is_file() and p.name != ".key")


# -- environment, limits --------------------------------------------------------------------------


def test_a_sandbox_environment_is_an_allow_list(monkeypatch):
    secrets = {"PARETUNE_WORKER_TOKEN": "ptw_x", "PARETUNE_TOKEN": "ptu_y", "PARETUNE_DATABASE_URL": "postgresql://u:p@h/db",
               "AWS_SECRET_ACCESS_KEY": "aws", "TRITON_CACHE_DIR": "/shared/triton", "SSH_AUTH_SOCK": "/tmp/agent"}
    allowed = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TRITON_PTXAS_PATH": "/opt/ptxas", "CC": "gcc"}
    for name, value in {**secrets, **allowed}.items():
        monkeypatch.setenv(name, value)
    env = sandbox_env([3], home="/tmp", overrides={"CUDA_VISIBLE_DEVICES": "3"})
    assert not set(secrets) & set(env)
    assert all(env[name] == value for name, value in allowed.items())
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["HOME"] == "/tmp" and env["OMP_NUM_THREADS"] == "1"


def test_a_study_lowers_the_workers_caps_and_never_raises_them():
    caps = isolation_limits.caps(SandboxLimits(memory_mb=4096))
    assert caps.processes == isolation_limits.DEFAULTS.processes
    limits = isolation_limits.effective(SandboxLimits(memory_mb=100_000, processes=32), caps)
    assert limits["memory_mb"] == 4096 and limits["source"]["memory_mb"] == "worker"
    assert limits["processes"] == 32 and limits["source"]["processes"] == "study"
    assert isolation_limits.exceeded(limits, "memory_mb") == (
        "the trial exceeded its memory limit of 4096 MiB (limits.sandbox.memory_mb; the worker's cap, "
        "--max-memory-mb)")
    assert "processes limit of 32 (limits.sandbox.processes)" in isolation_limits.explain_exception(
        BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), limits)
    assert "file size limit" in isolation_limits.explain_exception(OSError(errno.EFBIG, "File too large"), limits)
    try:
        raise ValueError("wrapped") from MemoryError()
    except ValueError as exc:
        assert "memory limit of 4096 MiB" in isolation_limits.explain_exception(exc, limits)
    assert isolation_limits.explain_exception(ValueError("other"), limits) is None


def test_rlimits_are_hard_inside_the_sandbox(tmp_path):
    """A process that set its limits cannot raise them again (not even the soft one past
    the hard one), and past them gets the errors the messages are made from."""
    code = """
import json, resource, sys
from workers.sandbox import limits as isolation_limits
isolation_limits.apply({"memory_mb": 512, "file_size_mb": 1, "open_files": 64, "processes": 100000,
                        "cpu_s": 30}, "python")
out = {}
try:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    out["raised"] = True
except ValueError:
    out["raised"] = False
try:
    bytearray(1 << 30)
except MemoryError:
    out["memory"] = "MemoryError"
try:
    with open(sys.argv[1], "wb") as f:
        f.write(b"x" * (2 << 20))
except OSError as exc:
    out["file"] = exc.errno
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")], capture_output=True, text=True,
                          cwd=REPO, check=True)
    out = json.loads(done.stdout)
    assert out == {"raised": False, "memory": "MemoryError", "file": errno.EFBIG}


# -- processes and uids --------------------------------------------------------------------------


def test_a_uid_sweep_kills_every_process_of_the_sandbox_uid(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("switching to a sandbox uid needs root")
    uid, lock = reserve_uids(None)
    try:
        marker = f"sweep-{uuid.uuid4().hex}"
        script = f"(setsid sh -c 'sleep 300; : {marker}' &) ; sleep 300; : {marker}"
        started = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c",
                                    script], start_new_session=True)
        deadline = time.monotonic() + 5
        while len(processes_of_uid(uid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_of_uid(uid)) >= 3  # sh, its sleep, the escaped sh and its sleep
        assert kill_uid(uid) >= 3
        started.wait(timeout=5)
        assert processes_of_uid(uid) == []
        with pytest.raises(IsolationUnavailable, match="in use by another agent"):
            reserve_uids(uid)  # pinned, but this process holds it
        other, other_lock = reserve_uids(None)
        assert other not in (uid, uid + 1) and other + 1 not in (uid, uid + 1)
        os.close(other_lock)
    finally:
        os.close(lock)


def test_a_sweep_spares_what_the_other_runners_of_the_uid_run(tmp_path):
    """Two compilers at the user level share the compile uid: the sweep after one's trial
    kills that trial's strays, never the other's compiler processes."""
    if os.geteuid() != 0:
        pytest.skip("switching to a sandbox uid needs root")
    sandbox = Sandbox(work_root=tmp_path / "work")
    sandbox.isolation = choose("user", work_root=sandbox.root, hidden=[])
    uid = sandbox.isolation.identity("compile").uid
    marker = f"sweep-{uuid.uuid4().hex}"

    def as_uid(script: str) -> subprocess.Popen:
        return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c",
                                 f"{script}; : {marker}"], start_new_session=True)

    sweeping = as_uid("exec sleep 300")  # the runner whose trial just ended
    other = as_uid("sleep 300 & sleep 300")  # another runner, compiling: two children
    stray = as_uid("exec sleep 300")  # left by the trial that ended
    try:
        deadline = time.monotonic() + 5
        while len(processes_of_uid(uid)) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        for runner in (sweeping, other):
            sandbox.runner_started("compile", runner.pid)
        others = {other.pid, *descendants([other.pid])}
        assert len(others) == 3
        sandbox.sweep("compile", keep={sweeping.pid})
        stray.wait(timeout=5)
        left = set(processes_of_uid(uid))
        assert others <= left and sweeping.pid in left and stray.pid not in left
        sandbox.runner_ended("compile", other.pid)
        sandbox.sweep("compile", keep={sweeping.pid})  # that runner is gone: what it ran is a stray
        other.wait(timeout=5)
        assert set(processes_of_uid(uid)) == {sweeping.pid}
    finally:
        kill_uid(uid)
        for process in (sweeping, other, stray):
            process.wait(timeout=5)
        sandbox.close()


def test_jobs_of_a_phase_at_once_belong_to_one_study_unless_namespaces_separate_them(tmp_path):
    """Several compilers at a level without namespaces share the compile uid: another
    study's compile waits until the running one ends, the same study's and another phase's
    do not."""
    import threading

    sandbox = Sandbox(work_root=tmp_path / "work")  # the none level
    entered: dict[str, float] = {}

    def other_study() -> None:
        with sandbox.claim("compile", 2):
            entered["other study"] = time.monotonic()

    try:
        with sandbox.claim("compile", 1):
            with sandbox.claim("compile", 1), sandbox.claim("run", 2):
                entered["same study, other phase"] = time.monotonic()
            waiting = threading.Thread(target=other_study)
            waiting.start()
            time.sleep(0.3)
            released = time.monotonic()
            assert "other study" not in entered
        waiting.join(timeout=5)
        assert entered["other study"] >= released
        assert not sandbox.claims  # every claim released
    finally:
        sandbox.close()
    separated = Sandbox(work_root=tmp_path / "ns")
    separated.isolation = choose("namespaces", work_root=separated.root, hidden=[])
    try:
        with separated.claim("compile", 1), separated.claim("compile", 2):
            pass  # each job in its own namespaces: nothing to wait for
    finally:
        separated.close()


def test_the_best_level_here_is_probed_and_named(tmp_path):
    sandbox = Sandbox(work_root=tmp_path / "work")
    try:
        with pytest.raises(IsolationUnavailable, match="unknown isolation level 'total'"):
            choose("total", work_root=sandbox.root, hidden=[])
        with pytest.raises(IsolationUnavailable, match="bwrap not found"):
            choose("namespaces", work_root=sandbox.root, hidden=[], bwrap=str(tmp_path / "no-bwrap"))
        secret = tmp_path / "secret"
        secret.mkdir(mode=0o700)
        best = choose("auto", work_root=sandbox.root, hidden=[secret])
        assert best.level.value == "namespaces", best.notes  # ./dev installs bubblewrap; the suite runs as root
        assert best.describe()["sandbox_uids"] == [best.identity("run").uid, best.identity("compile").uid]
        best.close()
    finally:
        sandbox.close()


# -- the worker token ------------------------------------------------------------------------------


def test_the_token_comes_from_a_file_the_environment_or_stdin(tmp_path, monkeypatch, caplog):
    token_file = tmp_path / "token"
    token_file.write_text("ptw_from_file\n")
    monkeypatch.setenv("PARETUNE_WORKER_TOKEN", "ptw_from_env")
    assert resolve_token(None, token_file) == "ptw_from_file"
    assert "PARETUNE_WORKER_TOKEN" not in os.environ  # no child inherits it
    monkeypatch.setenv("PARETUNE_WORKER_TOKEN", "ptw_from_env")
    assert resolve_token(None, None) == "ptw_from_env" and "PARETUNE_WORKER_TOKEN" not in os.environ
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("ptw_from_stdin\n"))
    assert resolve_token("-", None) == "ptw_from_stdin"
    assert resolve_token("ptw_on_the_command_line", None) == "ptw_on_the_command_line"
    assert "/proc" in caplog.text  # warned: visible to every user of the host
    with pytest.raises(typer.BadParameter, match="no worker token"):
        resolve_token(None, None)


def _wait_proc(pid: int, name: str) -> bytes:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        data = Path(f"/proc/{pid}/{name}").read_bytes()
        if data:
            return data
        time.sleep(0.05)
    raise AssertionError(f"/proc/{pid}/{name} stayed empty")


@pytest.mark.parametrize("starter", ["paretune up", "start_agent_process"])
def test_local_workers_get_their_token_through_stdin(tmp_path, starter, monkeypatch):
    """Neither the command line nor the environment of a started worker holds the token."""
    token = f"ptw_{uuid.uuid4().hex}"
    monkeypatch.setenv("PARETUNE_WORKER_TOKEN", token)  # even when the parent had it there
    monkeypatch.chdir(tmp_path)
    if starter == "paretune up":
        from service.cli import _start_local_worker

        process = _start_local_worker("http://127.0.0.1:9", token, 0)
    else:
        from workers.agent.launch import start_agent_process
        from workers.agent.settings import AgentSettings

        process = start_agent_process(AgentSettings(server="http://127.0.0.1:9", token=token,
                                                   cache_dir=tmp_path / "cache", isolation="none"),
                                      tmp_path / "worker.log")
    try:
        assert token.encode() not in _wait_proc(process.pid, "cmdline")
        assert token.encode() not in Path(f"/proc/{process.pid}/environ").read_bytes()
    finally:
        process.kill()
        process.wait()


# -- python objectives -------------------------------------------------------------------------------


def test_options_path_is_limited_to_the_workers_python_paths(tmp_path):
    from wire.failures import TrialFailure
    from workers.backends.python_backend import PYTHON_PATHS_ENV, load_objective

    offered, elsewhere = tmp_path / "offered", tmp_path / "elsewhere"
    for directory in (offered, elsewhere):
        directory.mkdir()
        (directory / f"mod_{directory.name}.py").write_text("def f(config):\n    return {'f1': 1.0}\n")
    previous = os.environ.get(PYTHON_PATHS_ENV)
    os.environ[PYTHON_PATHS_ENV] = str(offered)
    try:
        kernel = KernelSpec(backend="python", source="mod_offered:f", options={"path": str(offered / ".")})
        assert load_objective(kernel)({}) == {"f1": 1.0}
        for path in (str(elsewhere), str(offered / ".." / "elsewhere"), "/"):
            with pytest.raises(TrialFailure, match="--python-path"):
                load_objective(KernelSpec(backend="python", source="mod_elsewhere:f", options={"path": path}))
    finally:
        if previous is None:
            os.environ.pop(PYTHON_PATHS_ENV, None)
        else:
            os.environ[PYTHON_PATHS_ENV] = previous


# -- warm runners in namespaces ---------------------------------------------------------------------

LEAVES_A_CHILD = """
import os, subprocess

PROCESS = os.urandom(6).hex()


def leave(config):
    subprocess.Popen(["sh", "-c", "sleep 300; : " + config["marker"]], start_new_session=True)
    return {"f1": 1.0, "process": float(int(PROCESS, 16))}
"""


def _trial(study_id: int, marker: str):  # type: ignore[no-untyped-def]
    from wire.contract import TrialSpec

    return TrialSpec(trial_id=1, study_id=study_id, number=0, attempt=1, is_baseline=True,
                     kernel=KernelSpec(backend="python", source=LEAVES_A_CHILD, entry="leave"),
                     config={"marker": marker}, objectives=["f1"], compile_timeout_s=60, run_timeout_s=60)


def test_a_warm_runner_in_namespaces_loses_what_each_trial_left_and_serves_one_study(tmp_path):
    from plant import with_marker

    from workers.sandbox.context import Context
    from workers.sandbox.runner import RunnerPool
    from workers.sandbox.stages import execute_trial

    sandbox = Sandbox(work_root=tmp_path / "work")
    sandbox.isolation = choose("namespaces", work_root=sandbox.root, hidden=[])
    pool = RunnerPool(sandbox.root / "runners", sandbox=sandbox)
    context = Context(ArtifactCache(tmp_path / "cache"), sandbox, pool)
    marker = f"left-{uuid.uuid4().hex}"
    try:
        served = [execute_trial(_trial(study, marker), context) for study in (1, 1, 2, 1)]
        assert all(r is not None and r.status == "completed" for r in served), served
        processes = [r.metrics["process"].value for r in served]
        assert processes[0] == processes[1] == processes[3] != processes[2]  # one study per runner
        assert [r.environment["sandbox"]["trials_served"] for r in served] == [1, 2, 1, 3]
        assert with_marker(marker) == []  # each trial's child died with its trial
        runners = pool.runners[("run", "python")]
        # a spare, which has served no study, waits for the next new study
        assert [r.study_id for r in runners] == [1, 2, None] and all(r.alive() for r in runners)
        assert runners[2].served == 0
        assert [p for p in processes_of_uid(sandbox.isolation.identity("run").uid)] != []  # the runner itself
    finally:
        pool.close()
        sandbox.close()
    assert processes_of_uid(sandbox.isolation.identity("run").uid) == []


def test_a_new_study_finds_a_spare_runner_already_started_where_namespaces_separate_them(tmp_path):
    """When a study takes a runner that served no study, a spare starts for the next new study;
    that study takes the spare (started before it came) and another spare starts. One spare at
    a time; idle runners of other studies do not count it against `keep_idle`."""
    from workers.sandbox.runner import RunnerPool

    sandbox = Sandbox(work_root=tmp_path / "work")
    sandbox.isolation = choose("namespaces", work_root=sandbox.root, hidden=[])
    pool = RunnerPool(sandbox.root / "runners", sandbox=sandbox, keep_idle=1)
    try:
        first = pool.get("run", "python", 1)
        assert first is not None
        spare = pool.runners[("run", "python")][-1]
        assert spare is not first and spare.study_id is None and pool.started == 2
        pool.release(first)
        assert pool.get("run", "python", 1) is first  # its own study's runner again: no new spare
        pool.release(first)
        assert pool.started == 2
        second = pool.get("run", "python", 2)
        assert second is spare and second.study_id == 2  # started before study 2 came
        assert pool.started == 3 and [r.study_id for r in pool.runners[("run", "python")]] == [1, 2, None]
        assert second.ready_info() is not None or second.alive()
        pool.release(second)
        third = pool.get("run", "python", 3)  # keep_idle 1: study 1's runner, least recently used, goes
        assert third.study_id == 3 and not first.alive() and second.alive()
        assert [r.study_id for r in pool.runners[("run", "python")]] == [2, 3, None]
    finally:
        pool.close()
    several = RunnerPool(sandbox.root / "several", sandbox=sandbox, spares=lambda phase: 2)  # two compilers
    try:
        assert several.get("compile", "python", 1) is not None
        assert [r.study_id for r in several.runners[("compile", "python")]] == [1, None, None]
    finally:
        several.close()
        sandbox.close()


def test_runners_of_alternating_studies_stay_warm_where_namespaces_separate_them(tmp_path):
    """Two teams' studies whose trials alternate on a worker each keep their runner (a GPU
    runner's start is the interpreter, torch and a CUDA context: seconds per trial); past
    `keep_idle` idle runners the least recently used goes."""
    from workers.sandbox.runner import RunnerPool

    sandbox = Sandbox(work_root=tmp_path / "work")
    sandbox.isolation = choose("namespaces", work_root=sandbox.root, hidden=[])
    pool = RunnerPool(sandbox.root / "runners", sandbox=sandbox, keep_idle=2)
    try:
        handed = []
        for study in (1, 2, 1, 2, 1):
            runner = pool.get("run", "python", study)
            assert runner is not None
            handed.append(runner)
            pool.release(runner)
        assert handed[0] is handed[2] is handed[4] and handed[1] is handed[3] and handed[0] is not handed[1]
        assert pool.started == 3 and all(r.alive() for r in handed)  # and a spare
        third = pool.get("run", "python", 3)  # a third idle runner would be one too many only once it is idle
        assert third is not None and all(r.alive() for r in handed)
        pool.release(third)
        assert pool.get("run", "python", 4) is not None
        assert not handed[1].alive() and handed[0].alive()  # study 2's was the least recently used
        assert [r.study_id for r in pool.runners[("run", "python")]] == [1, 3, 4, None]
    finally:
        pool.close()
        sandbox.close()


def _objective_in_sandbox(root: Path, level: str, code: str, objectives: list[str]):  # type: ignore[no-untyped-def]
    """Run `code` (a module defining f(config)) as a python-backend trial at `level`, from an
    offered path under `root` (which the sandbox uid must be able to pass through)."""
    from wire.contract import TrialSpec
    from workers.backends.python_backend import PYTHON_PATHS_ENV
    from workers.sandbox.context import Context
    from workers.sandbox.stages import execute_trial

    offered = root / "objectives"
    offered.mkdir(mode=0o755)
    (offered / "team_objective.py").write_text(code)
    sandbox = Sandbox(work_root=root / "work", env_overrides={PYTHON_PATHS_ENV: str(offered)})
    sandbox.isolation = choose(level, work_root=sandbox.root, hidden=[], read_only=(str(offered),))
    try:
        spec = TrialSpec(trial_id=1, study_id=1, number=0, attempt=1, is_baseline=True,
                         kernel=KernelSpec(backend="python", source="team_objective:f",
                                           options={"path": str(offered)}),
                         config={}, objectives=objectives, compile_timeout_s=60, run_timeout_s=60)
        result = execute_trial(spec, Context(ArtifactCache(root / "cache"), sandbox))
    finally:
        sandbox.close()
    assert result is not None and result.status == "completed", result and result.message
    return result


def _traversable_root():  # type: ignore[no-untyped-def]
    top = tempfile.TemporaryDirectory()
    os.chmod(top.name, 0o755)  # pytest's tmp_path has parents the sandbox uid cannot pass
    return top


def test_an_offered_python_path_is_visible_read_only_in_namespaces(tmp_path):
    result = _objective_in_sandbox(tmp_path, "namespaces", (
        "import os\n"
        "def f(config):\n"
        "    try:\n"
        "        open(os.path.join(os.path.dirname(__file__), 'planted.py'), 'w').write('x = 1')\n"
        "        wrote = 1.0\n"
        "    except OSError:\n"
        "        wrote = 0.0\n"
        "    return {'f1': wrote}\n"), ["f1"])
    assert result.metrics["f1"].value == 0.0 and not (tmp_path / "objectives" / "planted.py").exists()


@pytest.mark.parametrize("level", ["namespaces", "user"])
def test_a_trial_has_a_user_name_though_its_uid_has_no_passwd_entry(level):
    """Libraries ask for the user's name (torch's cache directories, through
    getpass.getuser()); the sandbox uid is in no passwd file, so the name comes from the
    sandbox's environment instead of a KeyError that fails every GPU trial."""
    if os.geteuid() != 0 and level == "user":
        pytest.skip("the user level needs a root agent")
    with _traversable_root() as top:
        result = _objective_in_sandbox(Path(top), level, (
            "import getpass, os, pwd\n"
            "def f(config):\n"
            "    try:\n"
            "        pwd.getpwuid(os.getuid())\n"
            "        listed = 1.0\n"
            "    except KeyError:\n"
            "        listed = 0.0\n"
            "    return {'named': float(getpass.getuser() == 'paretune-trial'), 'listed': listed}\n"),
            ["named", "listed"])
    assert result.metrics["listed"].value == 0.0  # the case that failed: no passwd entry
    assert result.metrics["named"].value == 1.0


def test_the_compiler_named_by_cc_is_visible_in_namespaces(monkeypatch):
    """A compiler installed outside /usr (CC=/opt/gcc/bin/gcc on GPU hosts; Triton builds
    its launcher with it) is visible, read-only, inside the namespaces sandbox."""
    with _traversable_root() as top:
        root = Path(top)
        compiler = root / "toolchain" / "bin" / "cc"
        compiler.parent.mkdir(parents=True)
        (root / "toolchain" / "lib").mkdir()
        (root / "toolchain" / "lib" / "marker").write_text("42")
        compiler.write_text("#!/bin/sh\ncat \"$(dirname \"$0\")/../lib/marker\"\n")
        compiler.chmod(0o755)
        monkeypatch.setenv("CC", str(compiler))
        result = _objective_in_sandbox(root, "namespaces", (
            "import os, subprocess\n"
            "def f(config):\n"
            "    out = subprocess.run([os.environ['CC']], capture_output=True, text=True).stdout\n"
            "    try:\n"
            "        open(os.environ['CC'], 'a').close()\n"
            "        writable = 1.0\n"
            "    except OSError:\n"
            "        writable = 0.0\n"
            "    return {'ran': float(out.strip() == '42'), 'writable': writable}\n"), ["ran", "writable"])
    assert result.metrics["ran"].value == 1.0 and result.metrics["writable"].value == 0.0


def _python_trial(source: str, entry: str, **sandbox: int):  # type: ignore[no-untyped-def]
    from wire.contract import TrialSpec

    return TrialSpec(trial_id=1, study_id=1, number=0, attempt=1, is_baseline=True,
                     kernel=KernelSpec(backend="python", source=source, entry=entry), config={},
                     objectives=["f1"], compile_timeout_s=60, run_timeout_s=30, sandbox=SandboxLimits(**sandbox))


def test_cpu_time_is_limited_and_named(tmp_path):
    from workers.sandbox.context import Context
    from workers.sandbox.stages import execute_trial

    started = time.monotonic()
    result = execute_trial(_python_trial("def burn(config):\n    while True:\n        pass\n", "burn", cpu_s=1),
                           Context(ArtifactCache(tmp_path / "cache")))
    assert result is not None and result.failure_reason == "crash"
    assert "SIGXCPU" in result.message and "exceeded its CPU time limit of 1 s (limits.sandbox.cpu_s)" in result.message
    assert time.monotonic() - started < 20


def test_each_job_has_its_own_triton_cache_and_paths_recorded_in_a_build_follow_it(tmp_path):
    from workers.sandbox.context import Context
    from workers.sandbox.jobs import TOOL_CACHE, Job
    from workers.sandbox.stages import execute_trial, place_build

    reports_its_cache = (
        "import os\n"
        "def where(config):\n"
        "    directory = os.environ['TRITON_CACHE_DIR']\n"
        "    os.makedirs(directory, exist_ok=True)\n"
        "    return {'f1': 1.0 if directory.startswith(os.getcwd() + '/') else 0.0}\n")
    sandbox = Sandbox(work_root=tmp_path / "work")
    sandbox.isolation = choose("namespaces", work_root=sandbox.root, hidden=[])
    try:
        result = execute_trial(_python_trial(reports_its_cache, "where"), Context(ArtifactCache(tmp_path / "cache"),
                                                                                 sandbox))
        assert result is not None and result.metrics["f1"].value == 1.0, result
        built = tmp_path / "stage" / "build"
        (built / TOOL_CACHE / "abc").mkdir(parents=True)
        group = built / TOOL_CACHE / "abc" / "__grp__kernel.json"
        group.write_text(json.dumps({"child_paths": {"kernel.cubin": "/old/job-3/build/triton-cache/abc/k.cubin"}}))
        job = Job(tmp_path / "job", "/tmp/job-7")
        job.outside.mkdir()
        place_build(sandbox, job, CompiledKernel(built, {"report": "r.json"}, {"build_dir": "/old/job-3/build"}))
        moved = json.loads((job.build / TOOL_CACHE / "abc" / "__grp__kernel.json").read_text())
        assert moved["child_paths"]["kernel.cubin"] == "/tmp/job-7/build/triton-cache/abc/k.cubin"
        run_uid = sandbox.isolation.identity("run").uid
        assert (job.build / TOOL_CACHE).stat().st_uid == run_uid  # the trial's to write
        assert job.build.stat().st_uid == os.getuid()  # the rest of the build stays the agent's
    finally:
        sandbox.close()


def test_a_job_directory_is_removed_though_a_dying_process_still_writes_in_it(tmp_path):
    """A trial's process killed a moment ago may still write as its job directory is removed."""
    job = tmp_path / "run-job"
    job.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "end, i = time.monotonic() + 0.4, 0\n"
        "while time.monotonic() < end:\n"
        "    open(f'{sys.argv[1]}/f{i}', 'w').close(); i += 1\n"), str(job)])
    try:
        wait_for(lambda: any(job.iterdir()), 10, "the writer's first file")
        assert remove_tree(job)
        assert not job.exists()
    finally:
        writer.wait(10)
