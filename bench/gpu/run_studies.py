"""The whole stack on a GPU machine: the service on SQLite, one worker agent per GPU, a
study of each built-in GPU kernel, repeats of one configuration spread across each study,
and an exhaustive sweep of the GEMM space on a GPU of its own.

Roles by GPU count: with 4 GPUs the GEMM, attention and RMSNorm studies get one GPU each
and the sweep the fourth; with fewer, roles share GPUs (and take longer). Before the studies
start, the Triton kernels' spaces are compiled into the workers' artifact cache by a pool of
processes (the sweep needs every GEMM configuration compiled anyway); trials then find their
artifact there, as they would on a worker that has seen the configuration before.

Everything is written under OUT: studies.json (studies, trials with their details, fronts,
repeats), sweep.json, driver.log, logs.txt (service and worker logs).

    python3 bench/gpu/run_studies.py OUT [--trials 60] [--deadline-s 540]
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

OBJECTIVES = ["runtime_ms", "energy_mj", "p99_ms"]
MEASURE = {"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2, "hot_window_s": 0.6}
KERNELS = [("gemm", "triton", "gemm_bf16"), ("attention", "triton", "attention_fwd"), ("rmsnorm", "cuda", "rmsnorm")]
REPEATS = 5
PORT = 8765
SERVER = f"http://127.0.0.1:{PORT}"
STARTED = time.monotonic()


def log(message: str) -> None:
    line = f"[{time.monotonic() - STARTED:6.1f}s] {message}"
    print(line, flush=True)
    with open(OUT / "driver.log", "a") as handle:
        handle.write(line + "\n")


def roles(gpus: int) -> dict[str, int]:
    if gpus >= 4:
        return {"gemm": 0, "attention": 1, "rmsnorm": 2, "sweep": 3}
    if gpus == 3:
        return {"gemm": 0, "attention": 1, "rmsnorm": 2, "sweep": 0}
    if gpus == 2:
        return {"gemm": 0, "attention": 1, "rmsnorm": 1, "sweep": 0}
    return {"gemm": 0, "attention": 0, "rmsnorm": 0, "sweep": 0}


def cpu_slices(gpu: int, slots: int) -> tuple[str, str]:
    """Disjoint CPUs per GPU: four to measure on, the rest of its share to compile on."""
    share = max(8, (os.cpu_count() or 16) // max(1, slots))
    first = (gpu % max(1, slots)) * share
    return f"{first}-{first + 3}", f"{first + 4}-{first + share - 1}"


def cpu_list(*ranges: str) -> list[int]:
    cpus: list[int] = []
    for text in ranges:
        low, _, high = text.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


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


def pin(cpus: list[int]) -> None:
    usable = set(cpus) & os.sched_getaffinity(0)
    if usable:
        os.sched_setaffinity(0, usable)


def gpu_count() -> int:
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    return len([line for line in done.stdout.splitlines() if line.startswith("GPU ")])


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, check=True, cwd=REPO
    )
    return done.stdout.strip().splitlines()[-1]


def study_document(kernel: str, backend: str, builtin: str, pool: str, trials: int, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kernel": {"backend": backend, "builtin": builtin},
        "objectives": OBJECTIVES,
        "sampler": {"name": "tpe", "seed": 1, "options": {"n_startup_trials": 10, "multivariate": True}},
        "budget": {"max_trials": trials},
        "parallelism": 2,
        "pool": pool,
        "limits": {"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
        "measure": MEASURE,
    }


# --- compile ahead -------------------------------------------------------------------------


def _compile_one(job: tuple[str, str, dict[str, Any], str]) -> tuple[str, str | None]:
    from workers.backends import get_backend
    from workers.backends.base import TrialFailure
    from workers.cache import ArtifactCache
    from workers.contract import KernelSpec

    backend_name, builtin, config, cache_dir = job
    backend = get_backend(backend_name)
    spec = KernelSpec(backend=backend_name, builtin=builtin)
    cache = ArtifactCache(Path(cache_dir))
    key = backend.cache_key(spec, config)
    if cache.lookup(key) is not None:
        return key, None
    staging = cache.staging()
    started = time.perf_counter()
    try:
        built = backend.compile(spec, config, staging)
    except TrialFailure as failure:
        cache.discard(staging)
        return key, failure.message
    built.report.setdefault("compile_s", time.perf_counter() - started)
    cache.commit(key, built)
    return key, None


def compile_ahead(cache_dir: Path, gpu: int, processes: int, timeout_s: float = 90.0) -> dict[str, str]:
    """Every configuration of the Triton built-ins' spaces into the artifact cache."""
    sys.path.insert(0, str(REPO / "bench" / "gpu"))
    from sweep import space_points

    from workers.kernels import get_builtin

    jobs = []
    for _, backend, builtin in KERNELS:
        if backend != "triton":
            continue
        kernel = get_builtin(backend, builtin)
        assert kernel is not None
        jobs += [(backend, builtin, config, str(cache_dir)) for config in space_points(kernel.space)]
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    failures: dict[str, str] = {}
    finished = 0
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.imap_unordered(_compile_one, jobs)
        try:
            for _ in jobs:
                key, message = results.next(timeout=timeout_s)
                finished += 1
                if message:
                    failures[key] = message
        except multiprocessing.TimeoutError:
            log(f"compile ahead: no result for {timeout_s:.0f} s after {finished} of {len(jobs)}; going on")
            pool.terminate()
    del os.environ["CUDA_VISIBLE_DEVICES"]
    log(f"compiled ahead: {len(jobs)} configurations, {len(failures)} failed to compile")
    return failures


# --- the run ---------------------------------------------------------------------------------


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
        time.sleep(0.3)
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


def collect(api: Api, study_id: int, details: bool) -> dict[str, Any]:
    study = api.get(f"/v1/studies/{study_id}")
    trials = all_trials(api, study_id)
    if details:
        trials = [api.get(f"/v1/studies/{study_id}/trials/{t['number']}") for t in trials]
    return {"study": study, "trials": trials, "front": api.get(f"/v1/studies/{study_id}/front")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--deadline-s", type=float, default=540)
    parser.add_argument("--compile-processes", type=int, default=0)
    parser.add_argument("--no-compile-ahead", action="store_true")
    args = parser.parse_args()
    global OUT
    OUT = Path(args.out)
    OUT.mkdir(parents=True, exist_ok=True)
    deadline = STARTED + args.deadline_s
    work = Path("/tmp/paretune-gpu-run")
    work.mkdir(parents=True, exist_ok=True)
    cache_dir = work / "artifacts"
    gpus = int(os.environ.get("PARETUNE_BENCH_GPUS", "0")) or gpu_count()
    plan = roles(gpus)
    log(f"{gpus} GPUs; roles {plan}")
    env = {
        **os.environ,
        "PARETUNE_DATABASE_URL": f"sqlite:///{work / 'paretune.db'}",
        "PARETUNE_DATA_DIR": str(work),
        "PYTHONUNBUFFERED": "1",
    }
    admin = cli("token", "create", "--name", "bench", "--role", "admin", env=env)
    service_log = open(work / "service.log", "w")  # noqa: SIM115
    service = spawn(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(PORT), "--log-level", "warning"],
        env=env,
        cwd=REPO,
        stdout=service_log,
        stderr=subprocess.STDOUT,
    )
    processes = args.compile_processes or max(4, (os.cpu_count() or 8) - 8)
    failures = {} if args.no_compile_ahead else compile_ahead(cache_dir, plan["sweep"], processes)
    (work / "compile_failures.json").write_text(json.dumps(failures))
    wait_healthy()
    api = Api(admin)
    workers = []
    for gpu in sorted(set(plan[k] for k in ("gemm", "attention", "rmsnorm"))):
        token = cli("token", "create", "--name", f"gpu{gpu}", "--worker", "--pool", f"gpu{gpu}", env=env)
        worker_env = {**env, "CUDA_VISIBLE_DEVICES": str(gpu)}
        handle = open(work / f"worker{gpu}.log", "w")  # noqa: SIM115
        measure, compile_ = cpu_slices(gpu, len(set(plan.values())))
        workers.append(
            spawn(
                [
                    sys.executable,
                    str(REPO / "bench" / "gpu" / "gpu_worker.py"),
                    "--server",
                    SERVER,
                    "--token",
                    token,
                    "--pool",
                    f"gpu{gpu}",
                    "--name",
                    f"h200-gpu{gpu}",
                    "--cache-dir",
                    str(cache_dir),
                    "--measure-cpus",
                    measure,
                    "--compile-cpus",
                    compile_,
                ],
                env=worker_env,
                cwd=REPO,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        )
    log(f"service up, {len(workers)} workers started")
    studies: dict[str, int] = {}
    for kernel, backend, builtin in KERNELS:
        doc = study_document(kernel, backend, builtin, f"gpu{plan[kernel]}", args.trials, f"H200 {builtin}")
        studies[kernel] = api.post("/v1/studies", doc)["id"]
    log(f"studies {studies}")
    sweep_deadline = max(60.0, deadline - time.monotonic() - 90)
    sweep = spawn(
        [
            sys.executable,
            str(REPO / "bench" / "gpu" / "sweep.py"),
            "--kernel",
            "gemm_bf16",
            "--cache",
            str(cache_dir),
            "--out",
            str(OUT / "sweep.json"),
            "--deadline-s",
            f"{sweep_deadline:.0f}",
            "--failures",
            str(work / "compile_failures.json"),
            "--versus",
            str(work / "versus.json"),
            "--versus-wait-s",
            "60",
        ],
        env={**env, "CUDA_VISIBLE_DEVICES": str(plan["sweep"])},
        preexec_fn=lambda: pin(cpu_list(*cpu_slices(plan["sweep"], len(set(plan.values()))))),
        cwd=REPO,
        stdout=open(work / "sweep.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    repeats: dict[str, list[int]] = {k: [] for k in studies}
    marks = [round(i * args.trials / REPEATS) + 1 for i in range(REPEATS)]
    last_report = 0.0
    while time.monotonic() < deadline - 30:
        states = {k: api.get(f"/v1/studies/{i}") for k, i in studies.items()}
        for kernel, study in states.items():
            done = study["progress"]["completed"] + study["progress"]["failed"]
            while len(repeats[kernel]) < REPEATS and done >= marks[len(repeats[kernel])]:
                kernel_row = next(k for k in KERNELS if k[0] == kernel)
                doc = study_document(
                    kernel,
                    kernel_row[1],
                    kernel_row[2],
                    f"gpu{plan[kernel]}",
                    1,
                    f"H200 {kernel_row[2]} repeat {len(repeats[kernel]) + 1}",
                )
                doc["sampler"] = {"name": "random", "seed": 1}
                repeats[kernel].append(api.post("/v1/studies", doc)["id"])
        if "gemm" in states and states["gemm"]["state"] != "running" and not (work / "versus.json").exists():
            best = api.get(f"/v1/studies/{studies['gemm']}/trials", sort="runtime_ms", limit=1)["items"]
            if best:
                (work / "versus.json").write_text(json.dumps({"study_best": best[0]["config"]}))
        running = [k for k, s in states.items() if s["state"] == "running"]
        repeats_open = [r for ids in repeats.values() for r in ids if api.get(f"/v1/studies/{r}")["state"] == "running"]
        if time.monotonic() - last_report > 20:
            last_report = time.monotonic()
            log(
                "progress "
                + ", ".join(
                    f"{k}: {s['progress']['completed']}+{s['progress']['failed']}f/{s['progress']['max_trials']} "
                    f"{s['state']}"
                    for k, s in states.items()
                )
                + f"; repeats open {len(repeats_open)}"
            )
        if not running and not repeats_open and all(len(v) == REPEATS for v in repeats.values()):
            break
        time.sleep(2)
    for kernel, study_id in studies.items():
        if api.get(f"/v1/studies/{study_id}")["state"] == "running":
            log(f"deadline: cancelling {kernel}")
            api.post(f"/v1/studies/{study_id}/cancel")
    result = {"gpus": gpus, "roles": plan, "measure": MEASURE, "objectives": OBJECTIVES, "studies": {}}
    for kernel, study_id in studies.items():
        result["studies"][kernel] = collect(api, study_id, details=True)
        result["studies"][kernel]["repeats"] = [collect(api, r, details=True) for r in repeats[kernel]]
    (OUT / "studies.json").write_text(json.dumps(result, default=str))
    log("studies collected")
    if not (work / "versus.json").exists():
        best = api.get(f"/v1/studies/{studies['gemm']}/trials", sort="runtime_ms", limit=1)["items"]
        if best:
            (work / "versus.json").write_text(json.dumps({"study_best": best[0]["config"]}))
    try:
        sweep.wait(timeout=max(5, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        log("sweep still running at the deadline: stopped")
        sweep.kill()
    for process in [*workers, service]:
        process.terminate()
    for process in [*workers, service]:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    with open(OUT / "logs.txt", "w") as logs:
        for name in ["service.log", "sweep.log", *[f"worker{g}.log" for g in sorted(set(plan.values()))]]:
            path = work / name
            if path.exists():
                text = path.read_text(errors="replace")
                logs.write(f"===== {name} ({len(text)} chars, last 60000) =====\n{text[-60000:]}\n")
    summarize(result)


def summarize(result: dict[str, Any]) -> None:
    print(
        f"\n{'kernel':10} {'trials':>6} {'done':>5} {'fail':>5} {'base_rt':>8} {'best_rt':>8} {'front':>5} {'hv':>7} "
        f"{'rep_rt':>7} {'rep_E':>7}"
    )
    for kernel, data in result["studies"].items():
        study, trials = data["study"], data["trials"]
        done = [t for t in trials if t["state"] == "completed" and t.get("values")]
        base = next((t for t in done if t["is_baseline"]), None)
        best = min((t["values"]["runtime_ms"] for t in done), default=float("nan"))
        reps = [t["values"] for r in data["repeats"] for t in r["trials"] if t.get("values")]

        def spread(name: str, reps: list[dict[str, float]] = reps) -> str:
            vals = [v[name] for v in reps]
            return f"{max(vals) / min(vals) - 1:.4f}" if len(vals) >= 2 else "-"

        print(
            f"{kernel:10} {len(trials):6d} {len(done):5d} {study['progress']['failed']:5d} "
            f"{base['values']['runtime_ms'] if base else float('nan'):8.4f} {best:8.4f} "
            f"{len(data['front']['trials']):5d} {study.get('hypervolume') or 0:7.4f} "
            f"{spread('runtime_ms'):>7} {spread('energy_mj'):>7}"
        )
    sweep_path = OUT / "sweep.json"
    if sweep_path.exists():
        sweep = json.loads(sweep_path.read_text())
        best = sweep.get("best", {}).get("values", {}).get("runtime_ms")
        print(
            f"sweep: {sweep.get('evaluations')} evaluations, {sweep.get('completed')} completed, best {best}; "
            f"head to head {sweep.get('head_to_head', {}).get('median_runtime_ms')}"
        )


OUT = Path(".")


def dump_logs_on_failure() -> None:
    for path in sorted(Path("/tmp/paretune-gpu-run").glob("*.log")):
        print(f"===== {path.name} =====\n{path.read_text(errors='replace')[-3000:]}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        dump_logs_on_failure()
        raise
