"""The worker agent: registers, leases trials, runs each one sandboxed, heartbeats, reports.

Threads:
  leaser   leases trials (HTTP long-poll) and compiles each in a sandbox process on the
           compile CPUs; with prefetch it holds `lease_ahead` leases (default one) beyond
           the trial measuring, so trial N+1 compiles while trial N measures; with
           `compilers` N there are N leasers, each with its own compile process, so that
           N trials compile at once when compiling takes as long as measuring (screening);
  main     checks and measures one trial at a time in a sandbox process pinned to the
           measurement CPU (the device is never shared by two measurements, nor with a
           compile when the machine has a spare core), then posts the result;
           with warm runners (the default for the GPU backends) that sandbox process
           serves trial after trial and is replaced after any trial that fails;
  keeper   heartbeats every held lease with its phase; a 409 or cancel=true kills that
           trial's sandbox and drops it without a result.

Stopping (SIGTERM, or the stop event of run_agent): the agent stops leasing and drains:
trials it holds run to the end and their results are posted, if that takes no longer than
drain_timeout_s. Past that, or on a second SIGTERM/SIGINT (abort), the sandboxes are killed
and the agent exits without posting; it stops heartbeating, so the leases expire after
lease_s and the service re-queues the trials. An agent that holds nothing, its leasers
waiting in long-polls, exits at once: the service leases nothing to a poll whose worker
went away, and a lease that still comes is not run (it expires).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from wire.contract import (
    FailureReason,
    IsolationLevel,
    Lease,
    LeaseRequest,
    RegisterRequest,
    ResultAck,
    SandboxLimits,
    TrialResult,
    ValidationAck,
    ValidationReport,
)
from workers.backends import BackendUnavailable, get_backend, probe_backends
from workers.backends.python_backend import PYTHON_PATHS_ENV
from workers.cache import ArtifactCache, default_cache_dir
from workers.client import ApiError, ControlPlaneClient, GaveUp, LeaseGone
from workers.compilers import toolchains
from workers.fingerprint import collect, usable_cpus
from workers.sandbox import limits as isolation_limits
from workers.sandbox.context import Context
from workers.sandbox.isolation import IsolationUnavailable, choose
from workers.sandbox.procs import become_subreaper, hide_from_same_user
from workers.sandbox.runner import RunnerPool
from workers.sandbox.sandbox import Sandbox
from workers.sandbox.stages import CompileStage, compile_trial, failed, run_trial
from workers.validation.report import describe_lease, describe_report, failed_report
from workers.validation.stages import ValidationBuild, compile_validation, run_validation

log = logging.getLogger("paretune.worker")


@dataclass
class AgentConfig:
    server: str
    token: str
    pool: str = "default"
    name: str | None = None
    cache_dir: Path | None = None
    prefetch: bool = True
    lease_ahead: int = 1  # with prefetch: trials held leased (and compiled) beyond the one measuring
    compilers: int = 1  # with prefetch: trials compiled at once (at most lease_ahead)
    max_trials: int | None = None
    backends: list[str] | None = None  # None: every backend whose probe says available
    wait_s: float = 10.0  # lease long-poll
    drain_timeout_s: float = 30.0
    measure_cpus: list[int] | None = None  # default: the last usable CPU
    compile_cpus: list[int] | None = None  # default: the other usable CPUs
    cache_max_bytes: int = 2 << 30
    warm_runner: bool | None = None  # None: as each backend prefers (triton, cuda: warm)
    gpu: int | None = None  # the one GPU its sandboxes see (CUDA_VISIBLE_DEVICES)
    runner_start_timeout_s: float = 180.0
    isolation: str = "auto"  # auto (the best the host allows), namespaces, user or none
    sandbox_uid: int | None = None  # root agents: trials run as this uid (compile: +1)
    bwrap: str | None = None  # the bubblewrap binary (default: bwrap on PATH)
    limits: SandboxLimits | None = None  # the operator's caps (default: isolation_limits.DEFAULTS)
    python_paths: list[Path] = field(default_factory=list)  # objective modules trials may import
    work_dir: Path | None = None  # job directories (default: a fresh temporary directory)
    private_paths: list[Path] = field(default_factory=list)  # made unreadable to other users
    own_process: bool = False  # the agent is its process (`paretune worker`): it may take it over
    toolchain: str | None = None  # the CUDA toolchain trials compile with (workers.compilers.toolchains.find)


@dataclass
class AgentSummary:
    worker_id: int | None = None
    leased: int = 0
    completed: int = 0
    failed: int = 0
    abandoned: int = 0  # cancelled, lease lost, or dropped on abort
    unreported: int = 0  # finished, but the result could not be delivered
    elapsed_s: float = 0.0
    error: str | None = None
    trial_ids: list[int] = field(default_factory=list)


class AgentError(Exception):
    """The agent cannot serve (bad token, no usable backend)."""


@dataclass
class HeldLease:
    lease: Lease
    heartbeat_s: float
    lease_s: float
    phase: str = "leased"
    deadline: float = 0.0  # monotonic time the lease expires unless heartbeated
    next_beat: float = 0.0
    beating: bool = True
    cancel: threading.Event = field(default_factory=threading.Event)
    why_dropped: str = ""
    stage: CompileStage | None = None
    validation: ValidationBuild | None = None  # a validation job's builds

    @property
    def label(self) -> str:
        if self.lease.validation is not None:
            return describe_lease(self.lease.validation)
        t = self.lease.trial
        assert t is not None
        stage = f", {t.stage} stage" if t.stage else ""
        return f"trial {t.trial_id} (study {t.study_id} #{t.number}, attempt {t.attempt}{stage})"

    def drop(self, why: str) -> None:
        if not self.cancel.is_set():
            self.why_dropped = why
            self.cancel.set()


class Agent:
    def __init__(self, config: AgentConfig, stop_event: threading.Event | None = None) -> None:
        self.config = config
        self.stop = stop_event or threading.Event()
        self.abort = threading.Event()
        self.done = threading.Event()
        self.client = ControlPlaneClient(config.server, config.token, stop=self.stop, abort=self.abort)
        # --toolchain, else the one the pool requires, else this environment's own
        requested = config.toolchain or self.client.pool_toolchain(config.pool)
        self.toolchain = _select_toolchain(requested, config.own_process)
        self.cache = ArtifactCache(config.cache_dir or default_cache_dir())
        self.sandbox = self._sandbox()
        self.summary = AgentSummary()
        self.slots = threading.Semaphore(1 + max(1, config.lease_ahead) if config.prefetch else 1)
        self.leasers = max(1, min(config.compilers, config.lease_ahead)) if config.prefetch else 1
        self.ready: queue.Queue[HeldLease | None] = queue.Queue()
        # without prefetch the next lease comes with the previous result's acknowledgement
        # when one is queued (one request per trial); the leaser takes it before long-polling
        self.handed: queue.Queue[Lease] = queue.Queue()
        self.held: dict[str, HeldLease] = {}
        self.held_lock = threading.Lock()
        self.device_lock = threading.Lock()
        self.poll_lock = threading.Lock()
        self.polling = 0  # leasers waiting in a long-poll, holding nothing
        self.polls_abandoned = False  # the agent stopped without waiting for those long-polls to end
        self.stop_seen_at: float | None = None
        self.worker_id = 0
        self.register_request: RegisterRequest | None = None
        self.heartbeat_s, self.lease_s = 10.0, 60.0
        self.measure_cpus, self.compile_cpus, self.compile_needs_device = self._assign_cpus()
        self.runners = RunnerPool(
            self.sandbox.root / "runners",
            env_for=self._phase_env,
            warm_for=self._warm_for,
            sandbox=self.sandbox,
            start_timeout_s=config.runner_start_timeout_s,
        )
        self.context = Context(self.cache, self.sandbox, self.runners, self.compile_cpus, self.measure_cpus)

    def _sandbox(self) -> Sandbox:
        """Choose the isolation level (probed), keep the agent's secrets from its trials."""
        config = self.config
        private = [self.cache.root, *config.private_paths, *_data_dir()]
        for path in private:
            _make_private(path)
        if config.own_process:
            become_subreaper()  # a trial's setsid double-forked children become ours to kill
            hide_from_same_user()  # no trial of our user reads our environment or memory
        overrides = {"CUDA_VISIBLE_DEVICES": str(config.gpu)} if config.gpu is not None else {}
        toolchain_dirs: list[str] = []
        if self.toolchain is not None:
            overrides.update(self.toolchain.environment())
            toolchain_dirs.append(str(self.toolchain.root))
        read_only = tuple(str(p.resolve()) for p in config.python_paths)
        for directory in read_only:
            if os.stat(directory).st_mode & 0o005 != 0o005:
                log.warning("--python-path %s is not readable by other users: sandboxed trials cannot import "
                            "from it (chmod o+rx)", directory)
        if read_only:
            overrides[PYTHON_PATHS_ENV] = os.pathsep.join(read_only)
        read_only += tuple(toolchain_dirs)
        work = config.work_dir
        sandbox = Sandbox(caps=isolation_limits.caps(config.limits), work_root=work, env_overrides=overrides,
                          reap_orphans=config.own_process)
        try:
            sandbox.isolation = choose(config.isolation, work_root=sandbox.root, hidden=private,
                                       bwrap=config.bwrap, sandbox_uid=config.sandbox_uid, read_only=read_only)
        except IsolationUnavailable as exc:
            sandbox.close()
            raise AgentError(f"isolation {config.isolation!r} is not available here: {exc}") from None
        level = sandbox.isolation.level
        if level != IsolationLevel.NAMESPACES:
            log.warning(
                "ISOLATION IS %s, NOT namespaces: trials run %s. Why not better: %s. See docs/security.md.",
                level.value.upper(),
                "as the agent's own user and can read what it reads"
                if level == IsolationLevel.NONE
                else "as an unprivileged user but see the host and the network",
                "; ".join(sandbox.isolation.notes) or "asked for",
            )
        return sandbox

    def _phase_env(self, phase: str) -> dict[str, str]:
        cpus = self.compile_cpus if phase == "compile" else self.measure_cpus
        return self.sandbox.env(cpus, home="/tmp")

    def _warm_for(self, backend: str) -> bool:
        if self.config.warm_runner is not None:
            return self.config.warm_runner
        try:
            return bool(get_backend(backend).warm_by_default)
        except BackendUnavailable:
            return False

    def _assign_cpus(self) -> tuple[list[int] | None, list[int] | None, bool]:
        if not hasattr(os, "sched_setaffinity"):
            return None, None, self.config.prefetch  # cannot pin: never overlap the two
        cpus = usable_cpus()
        measure = self.config.measure_cpus or cpus[-1:]
        spare = [c for c in cpus if c not in measure] or cpus
        compile_ = self.config.compile_cpus or (spare if self.config.prefetch else cpus)
        overlap = self.config.prefetch and bool(set(compile_) & set(measure))
        return measure, compile_, overlap

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> AgentSummary:
        started = time.monotonic()
        try:
            self._register()
            self.cache.prune(self.config.cache_max_bytes)
            keeper = threading.Thread(target=self._keeper_loop, name="keeper", daemon=True)
            leasers = [threading.Thread(target=self._leaser_loop, name=f"leaser-{n}", daemon=True)
                       for n in range(self.leasers)]
            keeper.start()
            for leaser in leasers:
                leaser.start()
            self._measure_loop()
        except AgentError as exc:
            self.summary.error = str(exc)
            raise
        finally:
            self.done.set()
            self.abort.set()  # nothing may outlive run(): kill any sandbox still running
            self._drop_all("the agent stopped")
            self.runners.close()
            self.sandbox.close()
            self.client.close()
            self.summary.elapsed_s = time.monotonic() - started
            s = self.summary
            log.info(
                "worker stopped after %.0f s: %d leased, %d completed, %d failed, %d abandoned, %d unreported",
                s.elapsed_s,
                s.leased,
                s.completed,
                s.failed,
                s.abandoned,
                s.unreported,
            )
        return self.summary

    def request_stop(self) -> None:
        """Stop leasing and drain (first SIGTERM)."""
        self.stop.set()

    def request_abort(self, why: str = "aborted") -> None:
        """Kill running trials and exit without results (second signal, drain timeout)."""
        self.stop.set()
        self.abort.set()
        self._drop_all(why)

    def _register(self) -> None:
        probes = probe_backends(self.config.backends)
        if probes.get("cpu", {}).get("energy") and not self.sandbox.isolation.facts.get("rapl", True):
            probes["cpu"]["energy"] = False  # root may read RAPL; the sandbox user may not
            log.warning("the cpu backend's energy objectives are off: the sandbox user cannot read RAPL "
                        "(/sys/class/powercap/*/energy_uj is root's)")
        usable = [name for name, probe in probes.items() if probe.get("available")]
        if not usable:
            reasons = "; ".join(f"{n}: {p.get('reason', '')}" for n, p in probes.items())
            raise AgentError(f"no backend can run on this machine ({reasons})")
        fingerprint = collect(probes, gpu=self.config.gpu, isolation=self.sandbox.isolation.describe(),
                              limits=self.sandbox.caps.model_dump(), toolchain=self.toolchain)
        name = self.config.name or f"{socket.gethostname()}-{os.getpid()}"
        self.register_request = RegisterRequest(name=name, pool=self.config.pool, fingerprint=fingerprint)
        self._send_registration()
        log.info(
            "registered as worker %d (%s) in pool %r at %s; isolation %s; backends %s; energy %s; "
            "prefetch %s (lease ahead %d); measure CPUs %s, compile CPUs %s; GPU %s; warm runners for %s",
            self.worker_id,
            name,
            self.config.pool,
            self.config.server,
            self.sandbox.isolation.level.value,
            ",".join(usable),
            fingerprint.energy,
            self.config.prefetch,
            self.config.lease_ahead if self.config.prefetch else 0,
            self.measure_cpus,
            self.compile_cpus,
            "all visible" if self.config.gpu is None else self.config.gpu,
            ",".join(b for b in usable if self._warm_for(b)) or "none",
        )

    def _send_registration(self) -> None:
        assert self.register_request is not None
        try:
            registered = self.client.register(self.register_request)
        except ApiError as exc:
            raise AgentError(f"registration refused: {exc}") from exc
        except GaveUp as exc:
            raise AgentError(f"stopped before registering: {exc}") from exc
        self.worker_id = registered.worker_id
        self.summary.worker_id = registered.worker_id
        self.heartbeat_s, self.lease_s = registered.heartbeat_s, registered.lease_s

    # -- leasing and compiling (leaser thread) ---------------------------------------------

    def _leaser_loop(self) -> None:
        try:
            # a lease that came with the last result is run even once stopping: it is held
            while not self.stop.is_set() or not self.handed.empty():
                if not self.slots.acquire(timeout=0.2):
                    continue
                if self._budget_spent() or (self.stop.is_set() and self.handed.empty()):
                    self.slots.release()
                    break
                lease = self._lease_once()
                if lease is None:
                    self.slots.release()
                    continue
                held = self._hold(lease)
                self._compile(held)
                self.ready.put(held)
        except Exception:
            if not self.polls_abandoned:  # else the client closed under its long-poll
                log.exception("the leaser failed; stopping the worker")
            self.stop.set()
        finally:
            self.ready.put(None)

    def _budget_spent(self) -> bool:
        limit = self.config.max_trials
        return limit is not None and self.summary.leased >= limit

    def _lease_once(self) -> Lease | None:
        with contextlib.suppress(queue.Empty):
            return self.handed.get_nowait()
        with self.poll_lock:
            self.polling += 1
        try:
            lease = self._long_poll()
        finally:
            with self.poll_lock:
                self.polling -= 1
                abandoned = self.polls_abandoned
        if abandoned and lease is not None:
            self.summary.abandoned += 1
            log.warning("%s was leased as the worker stopped: not run; the service queues it again when its "
                        "lease expires", f"trial {lease.trial.trial_id}" if lease.trial else "a validation job")
            return None
        return lease

    def _all_polling(self, leasing: int) -> bool:
        """Whether each of the `leasing` leasers still going waits in a long-poll and nothing
        is held: a stopping agent then exits without waiting for the polls to end (the
        service leases nothing to a worker that went away; a lease that comes anyway is not
        run and expires)."""
        with self.poll_lock:
            if self.polling == leasing and self.ready.empty():
                self.polls_abandoned = True
            return self.polls_abandoned

    def _long_poll(self) -> Lease | None:
        request = LeaseRequest(worker_id=self.worker_id, wait_s=self.config.wait_s)
        try:
            return self.client.lease(request)
        except GaveUp:
            return None
        except ApiError as exc:
            if exc.status in (401, 403):
                log.error("the service refused this worker's token: %s", exc)
                self.summary.error = str(exc)
                self.stop.set()
            elif exc.status == 404 and exc.field in ("worker_id", "token"):
                # the service no longer knows this worker (e.g. a fresh database): re-register
                log.warning("the service does not know worker %d; registering again", self.worker_id)
                try:
                    self._send_registration()
                except AgentError as again:
                    log.error("%s", again)
                    self.stop.wait(5.0)
            else:
                log.error("lease request rejected: %s", exc)
                self.stop.wait(5.0)
            return None

    def _hold(self, lease: Lease) -> HeldLease:
        now = time.monotonic()
        heartbeat_s = lease.heartbeat_s or self.heartbeat_s
        held = HeldLease(
            lease,
            heartbeat_s,
            lease.lease_s or self.lease_s,
            deadline=now + (lease.lease_s or self.lease_s),
            next_beat=now + heartbeat_s,
        )
        with self.held_lock:
            self.held[lease.token] = held
        self.summary.leased += 1
        if lease.trial is None:
            log.info("%s leased", held.label)
            return held
        self.summary.trial_ids.append(lease.trial.trial_id)
        kernel = lease.trial.kernel
        what = kernel.builtin or kernel.entry or "source"
        if kernel.backend == "python" and kernel.source:
            what = kernel.source
        log.info("%s leased: %s/%s config %s", held.label, kernel.backend, what, lease.trial.config)
        return held

    def _compile(self, held: HeldLease) -> None:
        if held.cancel.is_set():
            return
        held.phase = "compile"
        lock = self.device_lock if self.compile_needs_device else contextlib.nullcontext()
        try:
            with lock:
                if held.lease.validation is not None:
                    held.validation = compile_validation(held.lease.validation, self.context.for_work(held.cancel))
                    return
                assert held.lease.trial is not None
                stage = compile_trial(held.lease.trial, self.context.for_work(held.cancel))
        except Exception as exc:  # a bug or a full disk here must fail the trial, not the worker
            log.exception("%s: the compile stage failed", held.label)
            stage = CompileStage(failure=failed(FailureReason.ERROR, f"worker error while compiling: {exc}"))
        held.stage = stage
        held.phase = "compiled"
        if stage.failure is not None:
            log.info(
                "%s compile failed after %.2f s: %s",
                held.label,
                stage.wall_s,
                stage.failure.message,
            )
        elif not stage.abandoned and stage.key:
            log.info(
                "%s compiled in %.2f s%s",
                held.label,
                stage.wall_s,
                " (cached)" if stage.cached else "",
            )

    # -- measuring and reporting (main thread) ---------------------------------------------

    def _measure_loop(self) -> None:
        leasing = self.leasers  # each leaser puts None when it stops
        while not self.abort.is_set():
            try:
                held = self.ready.get(timeout=0.2)
            except queue.Empty:
                if self.stop.is_set() and self._all_polling(leasing):
                    return
                continue
            if held is None:
                leasing -= 1
                if leasing == 0:
                    return
                continue
            try:
                self._run_and_report(held)
            except Exception as exc:  # report the trial failed rather than take the worker down
                log.exception("%s: the worker failed running it", held.label)
                why = f"worker error while running: {exc}"
                validation = held.lease.validation
                self._post(held, failed_report(validation, FailureReason.ERROR, why) if validation else failed(
                    FailureReason.ERROR, why))
            finally:
                with self.held_lock:
                    self.held.pop(held.lease.token, None)
                self.slots.release()

    def _run_and_report(self, held: HeldLease) -> None:
        spec = held.lease.trial
        result: TrialResult | ValidationReport | None = None

        def show(phase: str) -> None:
            held.phase = phase

        if not held.cancel.is_set() and held.validation is not None:
            with self.device_lock:
                result = run_validation(
                    held.validation, self.context.for_work(held.cancel, show),
                    self.register_request.fingerprint if self.register_request else None)
        elif not held.cancel.is_set() and held.stage is not None:
            assert spec is not None
            held.phase = "check"
            with self.device_lock:
                result = run_trial(spec, held.stage, self.context.for_work(held.cancel, show))
        if result is None or held.cancel.is_set():
            self.summary.abandoned += 1
            log.warning("%s abandoned: %s", held.label, held.why_dropped or "cancelled")
            return
        held.phase = "report"
        held.beating = False  # from here the result is retried until the lease expires
        self._post(held, result)

    def _post(self, held: HeldLease, result: TrialResult | ValidationReport) -> None:
        try:
            if isinstance(result, ValidationReport):
                ack: ResultAck | ValidationAck = self.client.post_validation(
                    held.lease.token, result, deadline=held.deadline)
            else:
                # with prefetch the leaser already holds the next lease; without, ask for it here
                result.next_lease = not self.config.prefetch and not self.stop.is_set() and not self._budget_spent()
                ack = self.client.post_result(held.lease.token, result, deadline=held.deadline)
                if ack.next_lease is not None:
                    self.handed.put(ack.next_lease)
        except LeaseGone as exc:
            self.summary.unreported += 1
            log.warning("%s result refused, the lease is gone: %s", held.label, exc)
            return
        except (GaveUp, ApiError) as exc:
            self.summary.unreported += 1
            log.error("%s result not delivered: %s", held.label, exc)
            return
        if result.status == "completed":
            self.summary.completed += 1
        else:
            self.summary.failed += 1
        what = describe_report(result) if isinstance(result, ValidationReport) else _describe(result)
        log.info("%s %s%s", held.label, what, " (duplicate)" if ack.duplicate else "")

    # -- heartbeats and drain deadline (keeper thread) -------------------------------------

    def _keeper_loop(self) -> None:
        while not self.done.wait(0.2):
            try:
                self._keep()
            except Exception:
                log.exception("heartbeat loop error (continuing)")

    def _keep(self) -> None:
        now = time.monotonic()
        if self.stop.is_set() and self.stop_seen_at is None:
            self.stop_seen_at = now
            log.info(
                "stopping: no new leases; draining held trials for up to %.0f s",
                self.config.drain_timeout_s,
            )
        if (
            self.stop_seen_at is not None
            and not self.abort.is_set()
            and now - self.stop_seen_at > self.config.drain_timeout_s
        ):
            log.warning("drain timeout: killing held trials, their leases will expire")
            self.request_abort("drain timeout")
        with self.held_lock:
            due = [h for h in self.held.values() if h.beating and not h.cancel.is_set() and now >= h.next_beat]
        for held in due:
            self._beat(held)

    def _beat(self, held: HeldLease) -> None:
        sent = time.monotonic()
        try:
            reply = self.client.heartbeat(held.lease.token, held.phase, deadline=sent + max(1.0, held.heartbeat_s))
        except LeaseGone as exc:
            held.drop(f"the lease is gone ({exc})")
            return
        except GaveUp as exc:
            log.warning("%s heartbeat failed: %s", held.label, exc)
            held.next_beat = time.monotonic() + 1.0
            return
        except ApiError as exc:
            log.error("%s heartbeat rejected: %s", held.label, exc)
            held.next_beat = time.monotonic() + held.heartbeat_s
            return
        held.deadline = sent + held.lease_s
        held.next_beat = sent + held.heartbeat_s
        if reply.cancel:
            held.drop("the study was cancelled")

    def _drop_all(self, why: str) -> None:
        with self.held_lock:
            for held in self.held.values():
                held.beating = False
                held.drop(why)


def _select_toolchain(requested: str | None, own_process: bool) -> toolchains.Toolchain | None:
    """The toolchain trials compile with: the one asked for, else this environment's own, if
    any. Its ptxas is then the one Triton uses too in every sandbox and, for an agent that is
    its process, in this process's probes, so that what the worker reports is what compiles.
    AgentError names what is installed when the one asked for is not."""
    try:
        toolchain = toolchains.find(requested) if requested else toolchains.selected()
    except toolchains.ToolchainError as exc:
        raise AgentError(str(exc)) from None
    if toolchain is not None and own_process:
        os.environ.update(toolchain.environment())
    return toolchain


def _data_dir() -> list[Path]:
    """The embedded service's data directory (its SQLite database), when it is here."""
    path = Path(os.environ.get("PARETUNE_DATA_DIR") or Path.cwd() / ".paretune")
    return [path] if path.exists() else []


def _make_private(path: Path) -> None:
    """No other user (a sandbox uid) may read or enter it."""
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode
        if mode & 0o077:
            path.chmod(mode & ~0o077)


def _describe(result: TrialResult) -> str:
    t = result.timings
    timing = ", ".join(
        f"{name} {t[key]:.2f} s"
        for name, key in (
            ("compile", "compile_wall_s"),
            ("check", "check_s"),
            ("measure", "measure_s"),
        )
        if key in t
    )
    if result.status == "completed":
        values = " ".join(f"{k}={m.value:.4g}{m.unit and ' ' + m.unit}" for k, m in result.metrics.items())
        return f"completed: {values} [{timing}]"
    reason = result.failure_reason.value if result.failure_reason else "?"
    return f"failed ({reason}): {result.message} [{timing}]"


def run_agent(config: AgentConfig, stop_event: threading.Event | None = None) -> AgentSummary:
    """Run a worker agent until stop_event is set (then drain) or max_trials are done.
    Safe to call from any thread (it installs no signal handlers)."""
    return Agent(config, stop_event).run()


class AgentThread:
    """A worker agent in a background thread of this process (used by `paretune up`)."""

    def __init__(self, config: AgentConfig) -> None:
        self.stop_event = threading.Event()
        self.summary: AgentSummary | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(config,), name="paretune-worker", daemon=True)

    def _run(self, config: AgentConfig) -> None:
        try:
            self.summary = run_agent(config, self.stop_event)
        except BaseException as exc:
            self.error = exc
            log.error("the local worker stopped: %s", exc)

    def start(self) -> AgentThread:
        self.thread.start()
        return self

    def stop(self, timeout: float | None = 60.0) -> AgentSummary | None:
        self.stop_event.set()
        self.thread.join(timeout)
        return self.summary


def start_agent_thread(config: AgentConfig) -> AgentThread:
    return AgentThread(config).start()


def start_agent_process(config: AgentConfig, log_path: Path | None = None) -> subprocess.Popen:
    """A worker agent as a child process (`python -m workers`); the token travels through
    its stdin, never its command line or environment. Stop it with SIGTERM (drain) and
    wait()."""
    command = [sys.executable, "-m", "workers", "--server", config.server, "--pool", config.pool, "--token", "-"]
    if config.name:
        command += ["--name", config.name]
    if config.cache_dir:
        command += ["--cache-dir", str(config.cache_dir)]
    if not config.prefetch:
        command.append("--no-prefetch")
    else:
        if config.lease_ahead != 1:
            command += ["--lease-ahead", str(config.lease_ahead)]
        if config.compilers != 1:
            command += ["--compilers", str(config.compilers)]
    if config.max_trials is not None:
        command += ["--max-trials", str(config.max_trials)]
    if config.backends:
        command += ["--backends", ",".join(config.backends)]
    if config.warm_runner is not None:
        command.append("--warm" if config.warm_runner else "--no-warm")
    if config.gpu is not None:
        command += ["--gpu", str(config.gpu)]
    for option, cpus in (("--measure-cpus", config.measure_cpus), ("--compile-cpus", config.compile_cpus)):
        if cpus:
            command += [option, ",".join(map(str, cpus))]
    command += ["--isolation", config.isolation]
    for option, value in (("--sandbox-uid", config.sandbox_uid), ("--bwrap", config.bwrap),
                          ("--work-dir", config.work_dir), ("--toolchain", config.toolchain)):
        if value is not None:
            command += [option, str(value)]
    for path in config.python_paths:
        command += ["--python-path", str(path)]
    for name, value in (config.limits.model_dump(exclude_none=True) if config.limits else {}).items():
        command += [f"--max-{name.replace('_', '-')}", str(value)]
    env = {k: v for k, v in os.environ.items() if k != "PARETUNE_WORKER_TOKEN"}
    output = log_path.open("ab") if log_path else None
    process = subprocess.Popen(
        command,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT if output else None,
        stdin=subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(config.token.encode() + b"\n")
    process.stdin.close()
    return process
