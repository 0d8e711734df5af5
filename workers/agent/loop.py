"""The worker agent: registers, leases work of every kind it has a Job for, runs each job
sandboxed, heartbeats, reports. The loops know no kind of work (workers.agent.jobs).

Threads:
  leaser   leases (HTTP long-poll) and compiles each job in a sandbox process on the compile
           CPUs; with prefetch it holds `lease_ahead` leases (default one) beyond the job
           measuring, so job N+1 compiles while job N measures; with `compilers` N there
           are N leasers, each with its own compile process, so that N jobs compile at once
           when compiling takes as long as measuring (screening);
  main     runs one job at a time in a sandbox process pinned to the measurement CPU (the
           device is never shared by two measurements, nor with a compile when the machine
           has a spare core), then posts its report to the one result endpoint; with warm
           runners (the default for the GPU backends) that sandbox process serves job after
           job and is replaced after any that fails;
  keeper   heartbeats every held lease with its phase (workers.agent.keeper).

Stopping (SIGTERM, or the stop event of run_agent): the agent stops leasing and drains: work
it holds runs to the end and its reports are posted, if that takes no longer than
drain_timeout_s. Past that, or on a second SIGTERM/SIGINT (abort), the sandboxes are killed
and the agent exits without posting; it stops heartbeating, so the leases expire after
lease_s and the service queues the work again. An agent that holds nothing, its leasers
waiting in long-polls, exits at once: the service leases nothing to a poll whose worker
went away, and a lease that still comes is not run (it expires).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass

from wire.contract import Lease, LeaseRequest, RegisterRequest, WorkReport
from workers.agent import jobs
from workers.agent.host import AgentError, assign_cpus, make_sandbox, select_toolchain
from workers.agent.jobs import Job
from workers.agent.keeper import HeldLease, LeaseKeeper
from workers.agent.settings import AgentSettings
from workers.backends import BackendUnavailable, get_backend, probe_backends
from workers.cache import ArtifactCache, default_cache_dir
from workers.client import ApiError, ControlPlaneClient, GaveUp, LeaseGone
from workers.fingerprint import collect
from workers.sandbox.context import Context
from workers.sandbox.runner import RunnerPool

log = logging.getLogger("paretune.worker")


@dataclass
class AgentSummary:
    worker_id: int | None = None
    leased: int = 0
    completed: int = 0
    failed: int = 0
    abandoned: int = 0  # cancelled, lease lost, or dropped on abort
    unreported: int = 0  # finished, but the report could not be delivered
    elapsed_s: float = 0.0
    error: str | None = None


@dataclass
class Running:
    """A held lease and its job, between the leaser and the measuring thread."""

    held: HeldLease
    job: Job


class ReadyQueue:
    """Compiled jobs waiting for the device, in the order they were put, but for jobs that
    go `first`, which go before every other; the leasers' end marks (None) come last."""

    def __init__(self) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Running | None]] = queue.PriorityQueue()
        self._count = itertools.count()

    def put(self, running: Running | None) -> None:
        rank = 2 if running is None else 0 if running.job.first else 1
        self._queue.put((rank, next(self._count), running))

    def get(self, timeout: float) -> Running | None:
        """The next job (queue.Empty after `timeout` seconds without one)."""
        return self._queue.get(timeout=timeout)[2]

    def empty(self) -> bool:
        return self._queue.empty()


class Agent:
    def __init__(self, settings: AgentSettings, stop_event: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop = stop_event or threading.Event()
        self.abort = threading.Event()
        self.done = threading.Event()
        self.client = ControlPlaneClient(settings.server, settings.token, stop=self.stop, abort=self.abort)
        self.kinds = list(settings.kinds or jobs.JOBS)
        unknown = [kind for kind in self.kinds if kind not in jobs.JOBS]
        if unknown:
            raise AgentError(f"this worker runs no work of kind {', '.join(unknown)}; it runs {', '.join(jobs.JOBS)}")
        # --toolchain, else the one the pool requires, else this environment's own
        requested = settings.toolchain or self.client.pool_toolchain(settings.pool)
        self.toolchain = select_toolchain(requested, settings.own_process)
        self.cache = ArtifactCache(settings.cache_dir or default_cache_dir())
        self.sandbox = make_sandbox(settings, [self.cache.root], self.toolchain)
        self.summary = AgentSummary()
        self.keeper = LeaseKeeper(self.client, self.stop, self.abort, settings.drain_timeout_s)
        self.slots = threading.Semaphore(1 + max(1, settings.lease_ahead) if settings.prefetch else 1)
        self.leasers = max(1, min(settings.compilers, settings.lease_ahead)) if settings.prefetch else 1
        self.ready = ReadyQueue()
        # without prefetch the next lease comes with the previous report's acknowledgement
        # when one is queued (one request per job); the leaser takes it before long-polling
        self.handed: queue.Queue[Lease] = queue.Queue()
        self.device_lock = threading.Lock()
        self.poll_lock = threading.Lock()
        self.polling = 0  # leasers waiting in a long-poll, holding nothing
        self.polls_abandoned = False  # the agent stopped without waiting for those long-polls to end
        self.worker_id = 0
        self.register_request: RegisterRequest | None = None
        self.measure_cpus, self.compile_cpus, self.compile_needs_device = assign_cpus(settings)
        self.runners = RunnerPool(self.sandbox.root / "runners", env_for=self._phase_env, warm_for=self._warm_for,
                                  sandbox=self.sandbox, start_timeout_s=settings.runner_start_timeout_s,
                                  keep_idle=settings.idle_runners,
                                  spares=lambda phase: self.leasers if phase == "compile" else 1)
        self.context = Context(self.cache, self.sandbox, self.runners, self.compile_cpus, self.measure_cpus)

    def _phase_env(self, phase: str) -> dict[str, str]:
        cpus = self.compile_cpus if phase == "compile" else self.measure_cpus
        return self.sandbox.env(cpus, home="/tmp")

    def _warm_for(self, backend: str) -> bool:
        if self.settings.warm_runner is not None:
            return self.settings.warm_runner
        try:
            return bool(get_backend(backend).warm_by_default)
        except BackendUnavailable:
            return False

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> AgentSummary:
        started = time.monotonic()
        try:
            self._register()
            self.cache.prune(self.settings.cache_max_bytes)
            threading.Thread(target=self.keeper.run, args=(self.done,), name="keeper", daemon=True).start()
            for n in range(self.leasers):
                threading.Thread(target=self._leaser_loop, name=f"leaser-{n}", daemon=True).start()
            self._measure_loop()
        except AgentError as exc:
            self.summary.error = str(exc)
            raise
        finally:
            self.done.set()
            self.abort.set()  # nothing may outlive run(): kill any sandbox still running
            self.keeper.drop_all("the agent stopped")
            self.runners.close()
            self.sandbox.close()
            self.client.close()
            s = self.summary
            s.elapsed_s = time.monotonic() - started
            log.info("worker stopped after %.0f s: %d leased, %d completed, %d failed, %d abandoned, %d unreported",
                     s.elapsed_s, s.leased, s.completed, s.failed, s.abandoned, s.unreported)
        return self.summary

    def request_stop(self) -> None:
        """Stop leasing and drain (first SIGTERM)."""
        self.stop.set()

    def request_abort(self, why: str = "aborted") -> None:
        """Kill running jobs and exit without reports (second signal, drain timeout)."""
        self.stop.set()
        self.abort.set()
        self.keeper.drop_all(why)

    def _register(self) -> None:
        probes = probe_backends(self.settings.backends)
        if probes.get("cpu", {}).get("energy") and not self.sandbox.isolation.facts.get("rapl", True):
            probes["cpu"]["energy"] = False  # root may read RAPL; the sandbox user may not
            log.warning("the cpu backend's energy objectives are off: the sandbox user cannot read RAPL "
                        "(/sys/class/powercap/*/energy_uj is root's)")
        usable = [name for name, probe in probes.items() if probe.get("available")]
        if not usable:
            reasons = "; ".join(f"{n}: {p.get('reason', '')}" for n, p in probes.items())
            raise AgentError(f"no backend can run on this machine ({reasons})")
        fingerprint = collect(probes, gpu=self.settings.gpu, isolation=self.sandbox.isolation.describe(),
                              limits=self.sandbox.caps.model_dump(), toolchain=self.toolchain)
        name = self.settings.name or f"{socket.gethostname()}-{os.getpid()}"
        self.register_request = RegisterRequest(name=name, pool=self.settings.pool, fingerprint=fingerprint,
                                                kinds=self.kinds)
        self._send_registration()
        s = self.settings
        log.info("registered as worker %d (%s) in pool %r at %s for %s; isolation %s; backends %s; energy %s; "
                 "prefetch %s (lease ahead %d); measure CPUs %s, compile CPUs %s; GPU %s; warm runners for %s",
                 self.worker_id, name, s.pool, s.server, ",".join(self.kinds), self.sandbox.isolation.level.value,
                 ",".join(usable), fingerprint.energy, s.prefetch, s.lease_ahead if s.prefetch else 0,
                 self.measure_cpus, self.compile_cpus, "all visible" if s.gpu is None else s.gpu,
                 ",".join(b for b in usable if self._warm_for(b)) or "none")

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
        self.keeper.heartbeat_s, self.keeper.lease_s = registered.heartbeat_s, registered.lease_s

    # -- leasing and compiling (leaser threads) --------------------------------------------

    def _leaser_loop(self) -> None:
        try:
            # a lease that came with the last report is run even once stopping: it is held
            while not self.stop.is_set() or not self.handed.empty():
                if not self.slots.acquire(timeout=0.2):
                    continue
                if self._budget_spent() or (self.stop.is_set() and self.handed.empty()):
                    self.slots.release()
                    break
                lease = self._lease_once()
                running = self._hold(lease) if lease is not None else None
                if running is None:
                    self.slots.release()
                    continue
                self._compile(running)
                self.ready.put(running)
        except Exception:
            if not self.polls_abandoned:  # else the client closed under its long-poll
                log.exception("the leaser failed; stopping the worker")
            self.stop.set()
        finally:
            self.ready.put(None)

    def _budget_spent(self) -> bool:
        limit = self.settings.max_trials
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
            log.warning("a %s was leased as the worker stopped: not run; the service queues it again when its "
                        "lease expires", lease.kind)
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
        request = LeaseRequest(worker_id=self.worker_id, wait_s=self.settings.wait_s)
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

    def _hold(self, lease: Lease) -> Running | None:
        job_class = jobs.JOBS.get(lease.kind or "")
        if job_class is None:  # never leased: the service leases the kinds registered
            log.error("leased a %s, which this worker cannot run; its lease will expire", lease.kind)
            return None
        held = self.keeper.hold(lease)
        fingerprint = self.register_request.fingerprint if self.register_request else None
        job = job_class(lease, self.context.for_work(held.cancel, held.show, held.show_rounds), fingerprint)
        held.label = job.label
        self.summary.leased += 1
        log.info("%s", job.leased())
        return Running(held, job)

    def _compile(self, running: Running) -> None:
        held, job = running.held, running.job
        if held.cancel.is_set():
            return
        held.phase = "compile"
        lock = self.device_lock if self.compile_needs_device else contextlib.nullcontext()
        try:
            with lock:
                job.compile()
        except Exception as exc:  # a bug or a full disk here must fail the job, not the worker
            log.exception("%s: the compile stage failed", held.label)
            job.outcome = job.failed(f"worker error while compiling: {exc}")
        held.phase = "compiled"
        said = job.compiled()
        if said:
            log.info("%s %s", held.label, said)

    # -- running and reporting (main thread) -----------------------------------------------

    def _measure_loop(self) -> None:
        leasing = self.leasers  # each leaser puts None when it stops
        while not self.abort.is_set():
            try:
                running = self.ready.get(timeout=0.2)
            except queue.Empty:
                if self.stop.is_set() and self._all_polling(leasing):
                    return
                continue
            if running is None:
                leasing -= 1
                if leasing == 0:
                    return
                continue
            try:
                self._run_and_report(running)
            except Exception as exc:  # report the job failed rather than take the worker down
                log.exception("%s: the worker failed running it", running.held.label)
                self._post(running, running.job.failed(f"worker error while running: {exc}"))
            finally:
                self.keeper.release(running.held)
                self.slots.release()

    def _run_and_report(self, running: Running) -> None:
        held, job = running.held, running.job
        if not held.cancel.is_set() and job.outcome is None:
            with self.device_lock:
                job.run()
        report = job.report()
        if report is None:
            self.summary.abandoned += 1
            log.warning("%s abandoned: %s", held.label, held.why_dropped or "cancelled")
            return
        held.phase = "report"
        held.beating = False  # from here the report is retried until the lease expires
        self._post(running, report)

    def _post(self, running: Running, report: WorkReport) -> None:
        held, job = running.held, running.job
        # with prefetch the leaser already holds the next lease; without, ask for it here
        report.next_lease = not self.settings.prefetch and not self.stop.is_set() and not self._budget_spent()
        try:
            ack = self.client.post_report(held.lease.token, report, job.ack, deadline=held.deadline)
        except LeaseGone as exc:
            self.summary.unreported += 1
            log.warning("%s report refused, the lease is gone: %s", held.label, exc)
            return
        except (GaveUp, ApiError) as exc:
            self.summary.unreported += 1
            log.error("%s report not delivered: %s", held.label, exc)
            return
        if ack.next_lease is not None:
            self.handed.put(ack.next_lease)
        if report.status == "completed":
            self.summary.completed += 1
        else:
            self.summary.failed += 1
        log.info("%s %s%s", held.label, job.describe(report), " (duplicate)" if ack.duplicate else "")
