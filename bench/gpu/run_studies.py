"""The whole stack on a GPU machine: the service on SQLite, one `paretune worker` agent per
GPU (`--gpu N` and its own CPU sets, warm runners), a study of each built-in GPU kernel,
repeats of the baseline configuration spread across each study, and for the GEMM a
head-to-head, on one GPU, of the study's best configuration against the recorded sweep's
best (interleaved rounds; on the study's own GPU and, with 4 GPUs, also on the fourth).

Per kernel: a one-trial repeat study goes first and shows that the worker can run the
kernel (if it cannot, that worker is restarted without warm runners); then the study; the
other repeats follow at even steps of the study's progress. At `--deadline-s` everything
still running is cancelled and what there is is written under OUT: studies.json (studies,
trials with details, fronts, repeats), h2h_gpu<N>.json, driver.log, logs.txt.

Studies that share a GPU run one after the other, so each has the GPU to itself. With
`--sweep`, the GEMM's whole space is also swept on the study's own GPU once the study is over
(compiled ahead meanwhile into a cache of the sweep's own), and the sweep ends with the
head-to-head of its best, the study's best and the baseline (sweep.json).

    python3 bench/gpu/run_studies.py OUT [--trials 60] [--gemm-trials 67] [--deadline-s 390]
    python3 bench/gpu/run_studies.py OUT --kernels gemm --repeats 1 --sampler '{"name": "tpe", ...}'
    python3 bench/gpu/run_studies.py OUT --sweep --deadline-s 560
    python bench/gpu/run_studies.py OUT --local    # the same on CPU kernels, to test the script
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

STARTED = time.monotonic()
OUT = Path(".")
PORT = int(os.environ.get("PARETUNE_BENCH_PORT", "8765"))  # the service these scripts start
SERVER = f"http://127.0.0.1:{PORT}"
REPEATS = 5
SAMPLER = {"name": "nsga2", "seed": 20261129, "options": {"population_size": 10}}
# the best configuration of every sweep so far (bench/results/gpu_gemm_bf16.md, runs 1, 4 and 6)
SWEEP_BEST = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}


@dataclass
class Profile:
    """What runs: the GPU built-ins, or CPU stand-ins that exercise the same script here."""

    kernels: dict[str, tuple[str, str]]  # role -> (backend, builtin)
    objectives: list[str]
    measure: dict[str, Any]
    sweep_best: dict[str, Any]
    baseline: dict[str, Any]
    limits: dict[str, Any] = field(default_factory=dict)


GPU = Profile(
    kernels={"gemm": ("triton", "gemm_bf16"), "attention": ("triton", "attention_fwd"), "rmsnorm": ("cuda", "rmsnorm")},
    objectives=["runtime_ms", "energy_mj", "p99_ms"],
    measure={"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2, "hot_window_s": 1.6},
    sweep_best=SWEEP_BEST,
    baseline={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3},
    limits={"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
)
LOCAL = Profile(
    kernels={"gemm": ("cpu", "matmul"), "attention": ("cpu", "stencil"), "rmsnorm": ("cpu", "matmul")},
    objectives=["runtime_ms", "p99_ms"],
    measure={"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 100, "target_s": 0.05, "hot_window_s": 0.1},
    sweep_best={
        "opt": "-O3",
        "march_native": True,
        "unroll": True,
        "vectorize": True,
        "inline_limit": 600,
        "TILE_M": 16,
        "TILE_N": 64,
        "TILE_K": 64,
    },
    baseline={
        "opt": "-O2",
        "march_native": False,
        "unroll": False,
        "vectorize": True,
        "inline_limit": 600,
        "TILE_M": 16,
        "TILE_N": 64,
        "TILE_K": 64,
    },
    limits={"compile_timeout_s": 60, "run_timeout_s": 60, "max_attempts": 2},
)


def log(message: str) -> None:
    line = f"[{time.monotonic() - STARTED:6.1f}s] {message}"
    print(line, flush=True)
    with open(OUT / "driver.log", "a") as handle:
        handle.write(line + "\n")


CHILDREN: list[subprocess.Popen] = []


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """A child process that is stopped when this script exits, however it exits."""
    process = subprocess.Popen(*args, **kwargs)
    CHILDREN.append(process)
    return process


@atexit.register
def _stop_children() -> None:
    for process in CHILDREN:
        if process.poll() is None:
            process.kill()


def service_env(work: Path, **extra: str) -> dict[str, str]:
    """The environment of a service on an SQLite file in `work`, and of its CLI and workers."""
    return {**os.environ, "PARETUNE_DATABASE_URL": f"sqlite:///{work / 'paretune.db'}",
            "PARETUNE_DATA_DIR": str(work), "PYTHONUNBUFFERED": "1", **extra}


def serve(work: Path, env: dict[str, str]) -> subprocess.Popen:
    """`paretune serve` on PORT, its log in work/service.log; returns once it answers."""
    process = spawn([sys.executable, "-m", "service.cli", "serve", "--port", str(PORT), "--log-level", "warning"],
                    env=env, cwd=REPO, stdout=open(work / "service.log", "w"),  # noqa: SIM115
                    stderr=subprocess.STDOUT)
    wait_healthy()
    return process


def wait_study(api: Api, study_id: int, until: float) -> dict[str, Any]:
    """The study once it has finished, or cancelled at `until` (time.monotonic())."""
    while True:
        study = api.get(f"/v1/studies/{study_id}")
        if finished(study):
            return study
        if time.monotonic() > until:
            log(f"study {study_id}: out of time, cancelled")
            api.post(f"/v1/studies/{study_id}/cancel")
            return api.get(f"/v1/studies/{study_id}")
        time.sleep(0.5)


def run_logged(bench: Any) -> Any:
    """`bench.run()`; when it fails, the tails of the logs in `bench.work` are printed first."""
    try:
        return bench.run()
    except BaseException:
        print(log_tails(bench.work, 3000), flush=True)
        raise


def start_fresh_worker(work: Path, env: dict[str, str], token: str, name: str, *, lease_ahead: int, compilers: int,
                       local: bool = False) -> subprocess.Popen:
    """A `paretune worker` on GPU 0 of pool gpu0 with a fresh artifact cache (work/artifacts-NAME)
    and Triton cache, so that it compiles nothing less because another study ran before."""
    measure, compile_ = cpu_sets(0, 1)
    command = [sys.executable, "-m", "workers", "--server", SERVER, "--pool", "gpu0", "--name", f"gpu0-{name}",
               "--cache-dir", str(work / f"artifacts-{name}"), "--gpu", "0", "--measure-cpus", measure,
               "--compile-cpus", compile_, "--warm", "--lease-ahead", str(lease_ahead), "--compilers", str(compilers),
               "--work-dir", str(jobs_dir(work, name))]
    if local:
        command += ["--backends", "cpu"]
    worker_env = {**env, "PARETUNE_WORKER_TOKEN": token, "TRITON_CACHE_DIR": str(work / f"triton-{name}")}
    process = spawn(command, env=worker_env, cwd=REPO, stdout=open(work / f"worker-{name}.log", "w"),  # noqa: SIM115
                    stderr=subprocess.STDOUT)
    log(f"worker {name} started (measure CPUs {measure}, compile CPUs {compile_})")
    return process


def jobs_dir(work: Path, name: str) -> Path:
    """Worker NAME's directory of job directories: a fresh one outside `work` (which only its
    owner may enter, and the sandbox users must reach their jobs), linked as work/jobs-NAME."""
    link = work / f"jobs-{name}"
    if not link.is_symlink():
        jobs = Path(tempfile.mkdtemp(prefix=f"paretune-jobs-{name}-"))
        atexit.register(shutil.rmtree, jobs, True)
        link.symlink_to(jobs)
    return link.resolve()


def wait_runners_ready(work: Path, name: str, deadline: float) -> float:
    """Wait until every warm runner of worker NAME (started by start_fresh_worker) has finished
    its warm-up, as on a worker that has been up a while; the seconds waited. Past the deadline,
    go on."""
    started = time.monotonic()
    runners = jobs_dir(work, name) / "runners"
    while time.monotonic() < deadline:
        dirs = [d for d in runners.glob("*") if d.is_dir()] if runners.is_dir() else []
        if all((d / "ready").exists() for d in dirs):
            break
        time.sleep(0.2)
    waited = time.monotonic() - started
    log(f"worker {name}: runners ready after {waited:.1f} s")
    return waited


def stop(process: subprocess.Popen | None) -> None:
    """Terminate, and kill after 30 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def gpu_count() -> int:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return 0
    return len([line for line in done.stdout.splitlines() if line.startswith("GPU ")])


def roles(gpus: int) -> tuple[dict[str, int], list[int]]:
    """Which GPU each study runs on, and where the GEMM head-to-head runs. The GEMM has a
    GPU of its own, so its head-to-head can follow it there as soon as it ends."""
    if gpus >= 3:
        return {"gemm": 0, "attention": 1, "rmsnorm": 2}, [0, 3] if gpus >= 4 else [0]
    if gpus == 2:
        return {"gemm": 0, "attention": 1, "rmsnorm": 1}, [0]
    return {"gemm": 0, "attention": 0, "rmsnorm": 0}, [0]


def cpu_sets(gpu: int, slots: int) -> tuple[str, str]:
    """Disjoint CPUs per GPU: four to measure on, the rest of its share to compile on."""
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // max(1, slots)
    if share < 2:  # a small machine: everything shares
        return str(cpus[gpu % len(cpus)]), ",".join(map(str, cpus))
    mine = cpus[gpu * share : (gpu + 1) * share]
    measure = mine[: min(4, share // 2)]
    return ",".join(map(str, measure)), ",".join(map(str, mine[len(measure) :]))


def log_tails(work: Path, chars: int) -> str:
    """The last `chars` characters of every *.log of a run's work directory, each under its name."""
    return "".join(f"===== {path.name} =====\n{path.read_text(errors='replace')[-chars:]}\n"
                   for path in sorted(work.glob("*.log")))


def cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, check=True, cwd=REPO
    )
    return done.stdout.strip().splitlines()[-1]


class Api:
    def __init__(self, token: str) -> None:
        self.client = httpx.Client(base_url=SERVER, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.client.post(path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:800]}")
        return response.json()


def wait_healthy(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{SERVER}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("service did not become healthy")


def all_trials(api: Api, study_id: int) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = api.get(f"/v1/studies/{study_id}/trials", **params)
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def collect(api: Api, study_id: int) -> dict[str, Any]:
    study = api.get(f"/v1/studies/{study_id}")
    trials = [api.get(f"/v1/studies/{study_id}/trials/{t['number']}") for t in all_trials(api, study_id)]
    return {"study": study, "trials": trials, "front": api.get(f"/v1/studies/{study_id}/front")}


def finished(study: dict[str, Any]) -> bool:
    return study["state"] not in ("running", "paused")


# --- compile ahead for the sweep ----------------------------------------------------------


def _compile_one(job: tuple[str, str, dict[str, Any], str]) -> tuple[str, str | None]:
    """One configuration into the artifact cache: (cache key, compile error or None)."""
    sys.path.insert(0, str(REPO / "bench" / "gpu"))
    from sweep import Harness

    from wire.contract import MeasureSettings
    from wire.failures import TrialFailure
    from workers.cache import ArtifactCache

    backend_name, builtin, config, cache_dir = job
    harness = Harness(backend_name, builtin, ArtifactCache(Path(cache_dir)), MeasureSettings())
    key = harness.backend.cache_key(harness.spec, config)
    try:
        harness.built(config)
    except TrialFailure as failure:
        return key, failure.message
    return key, None


def _pin(cpus: list[int]) -> None:
    os.sched_setaffinity(0, cpus)


def compile_ahead(backend: str, builtin: str, cache_dir: Path, gpu: int, cpus: list[int]) -> dict[str, str]:
    """Every point of a built-in's space into `cache_dir`, in parallel on `cpus`: the
    compile errors by cache key."""
    sys.path.insert(0, str(REPO / "bench" / "gpu"))
    from sweep import space_points

    from wire.kernels import get_builtin

    kernel = get_builtin(backend, builtin)
    assert kernel is not None
    jobs = [(backend, builtin, config, str(cache_dir)) for config in space_points(kernel.space)]
    failures: dict[str, str] = {}
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # inherited by the pool's processes
    try:
        context = multiprocessing.get_context("spawn")
        with context.Pool(max(1, min(8, len(cpus))), initializer=_pin, initargs=(cpus,)) as pool:
            for key, message in pool.imap_unordered(_compile_one, jobs, chunksize=2):
                if message:
                    failures[key] = message
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
    log(f"compiled ahead for the sweep: {len(jobs)} configurations, {len(failures)} compile errors")
    return failures


# --- the run -----------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        profile = LOCAL if args.local else GPU
        kernels = {k: v for k, v in profile.kernels.items() if k in args.kernels.split(",")}
        measure = {**profile.measure, **({"hot_window_s": args.hot_window_s} if args.hot_window_s else {})}
        self.profile = dataclasses.replace(profile, kernels=kernels, measure=measure)
        self.sampler: dict[str, Any] = json.loads(args.sampler) if args.sampler else SAMPLER
        self.deadline = STARTED + args.deadline_s
        self.work = Path(tempfile.mkdtemp(prefix="paretune-gpu-run-"))
        self.cache_dir = self.work / "artifacts"
        self.gpus = args.gpus or gpu_count() or (4 if args.local else 1)
        all_roles, self.versus_gpus = roles(self.gpus)
        self.roles = {k: gpu for k, gpu in all_roles.items() if k in self.profile.kernels}
        self.slots = self.gpus  # CPU shares, one per GPU
        self.env = service_env(self.work)
        self.workers: dict[int, subprocess.Popen] = {}
        self.worker_mode: dict[int, str] = {}
        self.studies: dict[str, int] = {}
        self.repeats: dict[str, list[int]] = {k: [] for k in self.profile.kernels}
        self.state: dict[str, str] = {}
        for kernel in self.profile.kernels:  # one study per GPU at a time: the others queue
            busy = any(self.roles[other] == self.roles[kernel] for other in self.state)
            self.state[kernel] = "queued" if busy else "preflight"
        self.sweep: subprocess.Popen | None = None
        self.sweep_cache = self.work / "sweep-artifacts"
        self.sweep_failures = self.work / "sweep-failures.json"
        self.compiled_ahead = threading.Event()
        self.h2h: dict[int, subprocess.Popen] = {}
        self.events: list[dict[str, Any]] = []
        self.preflight_since: dict[str, float] = {}
        self.study_started: dict[str, float] = {}

    # -- processes ------------------------------------------------------------------------

    def start_service(self) -> Api:
        admin = cli("token", "create", "--name", "bench", "--role", "admin", env=self.env)
        self.tokens = {
            gpu: cli("token", "create", "--name", f"gpu{gpu}", "--worker", "--pool", f"gpu{gpu}", env=self.env)
            for gpu in sorted(set(self.roles.values()))
        }
        serve(self.work, self.env)
        return Api(admin)

    def start_worker(self, gpu: int, warm: bool = True) -> None:
        measure, compile_ = cpu_sets(gpu, self.slots)
        command = [
            sys.executable, "-m", "workers", "--server", SERVER, "--pool", f"gpu{gpu}", "--name", f"h200-gpu{gpu}",
            "--cache-dir", str(self.cache_dir), "--gpu", str(gpu), "--measure-cpus", measure,
            "--compile-cpus", compile_, "--warm" if warm else "--no-warm",
        ]  # fmt: skip
        if self.args.local:
            command += ["--backends", "cpu,python"]
        self.workers[gpu] = spawn(
            command,
            env={**self.env, "PARETUNE_WORKER_TOKEN": self.tokens[gpu]},
            cwd=REPO,
            stdout=open(self.work / f"worker{gpu}.log", "a"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        self.worker_mode[gpu] = "warm" if warm else "fresh"
        log(f"worker gpu{gpu} started ({self.worker_mode[gpu]}; measure CPUs {measure}, compile CPUs {compile_})")

    def restart_worker_fresh(self, gpu: int, why: str) -> None:
        log(f"worker gpu{gpu}: {why}; restarting it without warm runners")
        self.events.append({"t": time.monotonic() - STARTED, "gpu": gpu, "event": "restart --no-warm", "why": why})
        process = self.workers[gpu]
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        self.start_worker(gpu, warm=False)

    # -- studies --------------------------------------------------------------------------

    def document(self, kernel: str, trials: int, name: str, sampler: dict[str, Any]) -> dict[str, Any]:
        backend, builtin = self.profile.kernels[kernel]
        return {
            "name": name,
            "kernel": {"backend": backend, "builtin": builtin},
            "objectives": self.profile.objectives,
            "sampler": sampler,
            "budget": {"max_trials": trials},
            "parallelism": 2,
            "pool": f"gpu{self.roles[kernel]}",
            "limits": self.profile.limits,
            "measure": self.profile.measure,
        }

    def trials_for(self, kernel: str) -> int:
        return self.args.gemm_trials if kernel == "gemm" else self.args.trials

    def add_repeat(self, api: Api, kernel: str) -> None:
        number = len(self.repeats[kernel]) + 1
        doc = self.document(
            kernel, 1, f"{self.profile.kernels[kernel][1]} repeat {number}", {"name": "random", "seed": 1}
        )
        self.repeats[kernel].append(api.post("/v1/studies", doc)["id"])

    def step(self, api: Api, kernel: str, now: float) -> None:
        """Advance one kernel: preflight repeat, then the study with repeats at even steps."""
        state = self.state[kernel]
        if state == "queued":
            gpu = self.roles[kernel]
            sharing = [k for k in self.profile.kernels if self.roles[k] == gpu]
            earlier = sharing[: sharing.index(kernel)]
            if all(self.state[k] == "done" for k in earlier) and not any(self.repeats_open(api, k) for k in earlier):
                self.state[kernel] = "preflight"
                log(f"{kernel}: GPU {gpu} is free; starting")
            return
        if state == "preflight":
            if not self.repeats[kernel]:
                self.add_repeat(api, kernel)
                self.preflight_since[kernel] = now
                return
            first = api.get(f"/v1/studies/{self.repeats[kernel][0]}")
            progress = first["progress"]
            gpu = self.roles[kernel]
            if progress["completed"] >= 1:
                self.start_study(api, kernel)
            elif progress["failed"] >= 1 or now - self.preflight_since[kernel] > self.args.preflight_s:
                why = "the first trial failed" if progress["failed"] else "no trial finished in time"
                if self.worker_mode[gpu] == "warm":
                    self.restart_worker_fresh(gpu, why)
                self.start_study(api, kernel)
            return
        if state == "study":
            study = api.get(f"/v1/studies/{self.studies[kernel]}")
            trials = self.trials_for(kernel)
            done = study["progress"]["completed"] + study["progress"]["failed"]
            repeats = self.args.repeats
            marks = [round(i * trials / repeats) for i in range(1, repeats)]
            started = self.study_started[kernel]
            span = max(1.0, self.deadline - self.args.h2h_s - started)
            while len(self.repeats[kernel]) < repeats:
                index = len(self.repeats[kernel])  # the next repeat is due at a mark or, failing that, a time
                if done < marks[index - 1] and now < started + index * span / repeats:
                    break
                self.add_repeat(api, kernel)
            if finished(study):
                self.state[kernel] = "done"
                log(f"{kernel}: study {study['state']} ({study.get('finish_reason')}) after {done} trials")

    def start_study(self, api: Api, kernel: str) -> None:
        trials = self.trials_for(kernel)
        doc = self.document(kernel, trials, f"H200 {self.profile.kernels[kernel][1]}", self.sampler)
        self.studies[kernel] = api.post("/v1/studies", doc)["id"]
        self.study_started[kernel] = time.monotonic()
        self.state[kernel] = "study"
        log(f"{kernel}: study {self.studies[kernel]} created ({trials} trials, pool gpu{self.roles[kernel]})")

    def repeats_open(self, api: Api, kernel: str) -> list[int]:
        return [r for r in self.repeats[kernel] if not finished(api.get(f"/v1/studies/{r}"))]

    # -- head to head ---------------------------------------------------------------------

    def write_versus(self, api: Api, configs: dict[str, Any]) -> Path:
        """`configs` and the GEMM study's best configuration, in the file sweep.py reads."""
        best = []
        if "gemm" in self.studies:
            best = api.get(f"/v1/studies/{self.studies['gemm']}/trials", sort="runtime_ms", limit=1)["items"]
        if best and best[0].get("values"):
            configs = {**configs, "study_best": best[0]["config"]}
        versus = self.work / "versus.json"
        versus.write_text(json.dumps(configs))
        return versus

    def spawn_sweep_py(self, gpu: int, versus: Path, log_name: str, *args: str) -> subprocess.Popen:
        """bench/gpu/sweep.py for the GEMM on `gpu` (its CPUs too), with the studies' settings."""
        measure, compile_ = cpu_sets(gpu, self.slots)
        cpus = [int(c) for c in f"{measure},{compile_}".split(",") if c]
        backend, builtin = self.profile.kernels["gemm"]
        command = [
            sys.executable, str(REPO / "bench" / "gpu" / "sweep.py"), "--kernel", builtin, "--backend", backend,
            "--versus", str(versus), "--rounds", str(self.args.rounds),
            "--deadline-s", f"{max(5.0, self.deadline - 15 - time.monotonic()):.0f}",
            "--objectives", ",".join(self.profile.objectives), "--settings", json.dumps(self.profile.measure), *args,
        ]  # fmt: skip
        return spawn(
            command,
            env={**self.env, "CUDA_VISIBLE_DEVICES": str(gpu)},
            preexec_fn=lambda cpus=cpus: os.sched_setaffinity(0, cpus),  # type: ignore[misc]
            cwd=REPO,
            stdout=open(self.work / log_name, "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )

    def start_head_to_head(self, api: Api) -> None:
        """The GEMM study's best against the recorded sweep's best and the baseline."""
        versus = self.write_versus(api, {"sweep_best": self.profile.sweep_best, "baseline": self.profile.baseline})
        log(f"head to head on GPUs {self.versus_gpus}: {versus.read_text()}")
        for gpu in self.versus_gpus:
            out = str(OUT / f"h2h_gpu{gpu}.json")
            self.h2h[gpu] = self.spawn_sweep_py(
                gpu, versus, f"h2h{gpu}.log", "--cache", str(self.cache_dir), "--out", out, "--only-versus"
            )

    # -- sweep ----------------------------------------------------------------------------

    def start_compile_ahead(self) -> None:
        """The sweep's artifacts, compiled on the GEMM GPU's compile CPUs while its study runs."""
        backend, builtin = self.profile.kernels["gemm"]
        gpu = self.roles["gemm"]
        _, compile_ = cpu_sets(gpu, self.slots)
        cpus = [int(c) for c in compile_.split(",") if c]

        def work() -> None:
            try:
                failures = compile_ahead(backend, builtin, self.sweep_cache, gpu, cpus)
                self.sweep_failures.write_text(json.dumps(failures))
            except Exception as exc:  # the sweep then compiles what it needs itself
                log(f"compile ahead failed: {exc!r}")
            finally:
                self.compiled_ahead.set()

        threading.Thread(target=work, daemon=True).start()

    def start_sweep(self, api: Api) -> None:
        """The GEMM's exhaustive sweep on the study's GPU, ending with the head-to-head of the
        sweep's best, the study's best and the baseline."""
        if not self.compiled_ahead.wait(timeout=60):  # the sweep compiles what is missing itself
            log("compile ahead still running; the sweep starts without its compile errors")
        versus = self.write_versus(api, {"baseline": self.profile.baseline})
        gpu = self.roles["gemm"]
        args = ["--cache", str(self.sweep_cache), "--out", str(OUT / "sweep.json")]
        if self.sweep_failures.exists():
            args += ["--failures", str(self.sweep_failures)]
        log(f"sweep on GPU {gpu}, then head to head with {versus.read_text()}")
        self.sweep = self.spawn_sweep_py(gpu, versus, "sweep.log", *args)

    # -- main loop ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        log(f"{self.gpus} GPUs; roles {self.roles}; head to head on {self.versus_gpus}; work {self.work}")
        api = self.start_service()
        for gpu in sorted(set(self.roles.values())):
            self.start_worker(gpu)
        log("service up, workers started")
        if self.args.sweep and "gemm" in self.profile.kernels:
            self.start_compile_ahead()
        h2h_at = self.deadline - self.args.h2h_s
        stop_at = self.deadline - 20
        last_report = 0.0
        while True:
            now = time.monotonic()
            for kernel in self.profile.kernels:
                self.step(api, kernel, now)
            gemm_quiet = self.state.get("gemm") == "done" and not self.repeats_open(api, "gemm")
            if "gemm" in self.state and not self.h2h and not self.sweep and (gemm_quiet or now > h2h_at):
                self.cancel(api, ["gemm"])
                if self.args.sweep:
                    self.start_sweep(api)
                else:
                    self.start_head_to_head(api)
            if now - last_report > 15:
                last_report = now
                self.report_progress(api)
            everything_done = all(s == "done" for s in self.state.values()) and not any(
                self.repeats_open(api, k) for k in self.profile.kernels
            )
            comparisons = [*self.h2h.values(), *([self.sweep] if self.sweep else [])]
            h2h_done = "gemm" not in self.state or (comparisons and all(p.poll() is not None for p in comparisons))
            if (everything_done and h2h_done) or now > stop_at:
                break
            time.sleep(1.0)
        self.cancel(api, list(self.profile.kernels))
        return self.finish(api)

    def cancel(self, api: Api, kernels: list[str]) -> None:
        for kernel in kernels:
            for study_id in [self.studies.get(kernel), *self.repeats[kernel]]:
                if study_id is not None and not finished(api.get(f"/v1/studies/{study_id}")):
                    log(f"cancelling study {study_id} ({kernel})")
                    api.post(f"/v1/studies/{study_id}/cancel")
            self.state[kernel] = "done"

    def report_progress(self, api: Api) -> None:
        parts = []
        for kernel, study_id in self.studies.items():
            p = api.get(f"/v1/studies/{study_id}")["progress"]
            parts.append(f"{kernel} {p['completed']}+{p['failed']}f/{p['max_trials']}")
        log("progress " + ", ".join(parts) + f"; repeats {sum(map(len, self.repeats.values()))}")

    def finish(self, api: Api) -> dict[str, Any]:
        running = {f"head to head on GPU {gpu}": p for gpu, p in self.h2h.items()}
        if self.sweep:
            running["sweep"] = self.sweep
        for name, process in running.items():
            try:
                process.wait(timeout=max(1.0, self.deadline - 8 - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} still running: stopped (what it wrote so far is kept)")
                process.kill()
        result: dict[str, Any] = {
            "gpus": self.gpus,
            "roles": self.roles,
            "versus_gpus": self.versus_gpus,
            "measure": self.profile.measure,
            "objectives": self.profile.objectives,
            "sampler": self.sampler,
            "worker_mode": self.worker_mode,
            "events": self.events,
            "elapsed_s": time.monotonic() - STARTED,
            "studies": {},
        }
        for kernel in self.profile.kernels:
            entry = collect(api, self.studies[kernel]) if kernel in self.studies else {}
            entry["repeats"] = [collect(api, r) for r in self.repeats[kernel]]
            result["studies"][kernel] = entry
        (OUT / "studies.json").write_text(json.dumps(result, default=str))
        log("studies collected")
        for process in self.workers.values():
            process.terminate()
        for process in self.workers.values():
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        with open(OUT / "logs.txt", "w") as logs:
            names = ["service.log", *[f"worker{g}.log" for g in self.workers], *[f"h2h{g}.log" for g in self.h2h]]
            names += ["sweep.log"] if self.sweep else []
            for name in names:
                path = self.work / name
                if path.exists():
                    text = path.read_text(errors="replace")
                    logs.write(f"===== {name} ({len(text)} chars, last 40000) =====\n{text[-40000:]}\n")
        return result


def summarize(result: dict[str, Any]) -> None:
    print(f"\n{'kernel':10} {'trials':>6} {'done':>5} {'fail':>5} {'base_rt':>8} {'best_rt':>8} {'front':>5} "
          f"{'hv':>7} {'rep_rt':>7} {'rep_E':>7} {'tpm':>6}")  # fmt: skip
    for kernel, data in result["studies"].items():
        if "study" not in data:
            print(f"{kernel:10} no study")
            continue
        study, trials = data["study"], data["trials"]
        done = [t for t in trials if t["state"] == "completed" and t.get("values")]
        base = next((t for t in done if t["is_baseline"]), None)
        best = min((t["values"]["runtime_ms"] for t in done), default=float("nan"))
        reps = [t["values"] for r in data["repeats"] for t in r["trials"] if t.get("values")]

        def spread(name: str, reps: list[dict[str, float]] = reps) -> str:
            vals = [v[name] for v in reps if name in v]
            return f"{max(vals) / min(vals) - 1:.4f}" if len(vals) >= 2 else "-"

        times = [(t["started_at"], t["finished_at"]) for t in trials if t.get("finished_at") and t.get("started_at")]
        tpm = "-"
        if len(times) >= 2:
            from datetime import datetime

            first = min(datetime.fromisoformat(s) for s, _ in times)
            last = max(datetime.fromisoformat(f) for _, f in times)
            tpm = f"{len(times) / max(1e-9, (last - first).total_seconds()) * 60:.1f}"
        print(
            f"{kernel:10} {len(trials):6d} {len(done):5d} {study['progress']['failed']:5d} "
            f"{base['values']['runtime_ms'] if base else float('nan'):8.4f} {best:8.4f} "
            f"{len(data['front']['trials']):5d} {study.get('hypervolume') or 0:7.4f} "
            f"{spread('runtime_ms'):>7} {spread('energy_mj'):>7} {tpm:>6}"
        )
    for path in sorted(OUT.glob("h2h_gpu*.json")) + sorted(OUT.glob("sweep.json")):
        h2h = json.loads(path.read_text()).get("head_to_head", {})
        print(f"{path.name}: rounds {h2h.get('rounds')} medians {json.dumps(h2h.get('median_runtime_ms'))}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--gemm-trials", type=int, default=67)
    parser.add_argument("--deadline-s", type=float, default=390)
    parser.add_argument("--h2h-s", type=float, default=75, help="head to head starts this long before the deadline")
    parser.add_argument("--preflight-s", type=float, default=120)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--kernels", default="gemm,attention,rmsnorm", help="which studies run (comma separated)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="one-trial repeats of the baseline per kernel")
    parser.add_argument("--sampler", default="", help="the studies' sampler as JSON (default: SAMPLER)")
    parser.add_argument("--local", action="store_true", help="CPU kernels, to test the script without a GPU")
    parser.add_argument(
        "--hot-window-s", type=float, default=0.0, help="the studies' hot window (default 1.6 s, as for energy studies)"
    )
    parser.add_argument("--sweep", action="store_true", help="sweep the GEMM's space on its GPU after its study")
    args = parser.parse_args()
    global OUT
    OUT = Path(args.out)
    OUT.mkdir(parents=True, exist_ok=True)
    summarize(run_logged(Run(args)))


if __name__ == "__main__":
    main()
