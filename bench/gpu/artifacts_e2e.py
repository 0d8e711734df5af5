"""An approved artifact end to end on one GPU, and its speed outside the service.

The whole stack (the service on SQLite and one `paretune worker` agent on GPU 0) tunes the
built-in bf16 GEMM briefly, promotes the study's fastest configuration (hot runtime_ms),
validates it against the baseline in interleaved rounds, approves it with a second token,
pulls the signed artifact with `paretune artifact pull` and verifies it. Then a separate,
plain PyTorch process that imports neither the service nor its client loads the artifact
with the runtime module (workers.runtime, offline, verified against the pinned key), runs the
kernel with exactly the approved configuration, checks its result against torch, and times
it against the baseline configuration the same way the worker measures runtime_ms (hot time
per call: a CUDA graph of calls replayed back to back), in interleaved rounds.

Printed and written to OUT/artifacts_e2e.json: the validation's ratio approved/baseline with
its confidence interval, the ratio measured in the plain process, and whether it lies within
the interval (and the plain process's own interval, by the same statistics, and whether the
two overlap); the absolute hot times beside the validated ones.

    python3 bench/gpu/artifacts_e2e.py OUT [--trials 12] [--rounds 10]
    python bench/gpu/artifacts_e2e.py OUT --local    # the cpu backend's matmul, to test the script

On the GPU machine (Python 3.12; the packages its image lacks travel as wheels, made here
with bench/gpu/fetch_wheels.sh), about six minutes:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site timeout 570 python3 bench/gpu/artifacts_e2e.py $OUT --trials 12 --rounds 10

(`--apply DIR` is the plain process's own mode.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "gpu"))

GPU_MEASURE = {"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2, "hot_window_s": 1.0}
LOCAL_MEASURE = {"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 100, "target_s": 0.05, "hot_window_s": 0.1}


# -- the plain process: runtime module, no service --------------------------------------------


def apply_gpu(store: Any, baseline: dict[str, Any], dims: dict[str, int], rounds: int) -> dict[str, Any]:
    import torch
    import triton

    from wire.kernels.gpu import gemm_bf16 as gemm

    m, n, k = dims["m"], dims["n"], dims["k"]
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((k, n), device="cuda", dtype=torch.bfloat16)
    c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    tuned = store.autotune("gemm_bf16", key=["M", "N", "K"], default=[])(gemm.matmul_kernel)
    launch = store.launch_options("gemm_bf16")
    meta = {key: value for key, value in baseline.items() if key.isupper()}
    options = {key: value for key, value in baseline.items() if not key.isupper()}

    def grid(config: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(m, config["BLOCK_M"]) * triton.cdiv(n, config["BLOCK_N"]),)

    def approved() -> None:
        tuned[grid](*args, GROUP_M=8, **launch)

    def default() -> None:
        gemm.matmul_kernel[grid(meta)](*args, GROUP_M=8, **meta, **options)

    approved()
    torch.cuda.synchronize()
    expected = a.float() @ b.float()
    error = ((c.float() - expected).norm() / expected.norm()).item()

    return {"rel_l2_err": error, "correct": error < 2e-2, **interleave(approved, default, hot_ms, rounds),
            "launch_options": launch, "match": _match(store, "gemm_bf16")}


def hot_ms(fn: Any, window_s: float = 1.0, warmup_s: float = 0.1) -> float:
    """The worker's runtime_ms on a GPU: a CUDA graph of about 10 ms of back-to-back calls,
    replayed for `window_s` after a warm-up; the median per-call time of the replays."""
    import torch

    event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    fn()
    start, end = event(), event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, min(1000, round(10.0 / max(start.elapsed_time(end), 1e-3))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    replay_ms = max(start.elapsed_time(end) * calls, 1e-3)
    for _ in range(max(1, round(warmup_s * 1000 / replay_ms))):
        graph.replay()
    marks = [event() for _ in range(max(10, round(window_s * 1000 / replay_ms)) + 1)]
    marks[0].record()
    for mark in marks[1:]:
        graph.replay()
        mark.record()
    marks[-1].synchronize()
    return statistics.median(x.elapsed_time(y) / calls for x, y in zip(marks[:-1], marks[1:], strict=True))


def apply_cpu(store: Any, baseline: dict[str, Any], dims: dict[str, int], rounds: int) -> dict[str, Any]:
    import ctypes

    import numpy as np

    from wire.kernels import get_builtin
    from workers.backends.cpu import flags_for

    work = Path(tempfile.mkdtemp(prefix="paretune-apply-"))
    (work / "matmul.c").write_text(get_builtin("cpu", "matmul").read_source())  # type: ignore[union-attr]
    libraries = {}
    for name, flags in (("approved", store.flags("matmul", "cc")), ("default", flags_for(baseline))):
        subprocess.run(["cc", "-shared", "-fPIC", *flags, "-o", f"{name}.so", "matmul.c"], cwd=work, check=True)
        libraries[name] = ctypes.CDLL(str(work / f"{name}.so"))
    m, n, k = dims.get("m", dims.get("n")), dims.get("n"), dims.get("k", dims.get("n"))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), dtype=np.float32)
    pointers = [ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                *(ctypes.c_void_p(x.ctypes.data) for x in (a, b, c))]

    def call(name: str) -> Any:
        return lambda: libraries[name].matmul(*pointers)

    call("approved")()
    error = float(np.linalg.norm(c - a @ b) / np.linalg.norm(a @ b))

    def hot_ms(fn: Any, window_s: float = 0.2) -> float:
        """The median of back-to-back calls, as the cpu backend's runtime_ms (its mean would
        carry the tail a shared machine adds)."""
        fn()
        samples, started = [], time.perf_counter()
        while time.perf_counter() - started < window_s or len(samples) < 5:
            begin = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - begin) * 1000)
        return statistics.median(samples)

    return {"rel_l2_err": error, "correct": error < 1e-4,
            **interleave(call("approved"), call("default"), hot_ms, rounds),
            "flags": store.flags("matmul", "cc"), "match": _match(store, "matmul")}


def interleave(approved: Any, default: Any, hot_ms: Any, rounds: int) -> dict[str, Any]:
    """Hot time per call of both, in rounds that alternate which goes first."""
    times: dict[str, list[float]] = {"approved": [], "default": []}
    for index in range(rounds):
        order = [("approved", approved), ("default", default)]
        for name, fn in order if index % 2 == 0 else reversed(order):
            times[name].append(hot_ms(fn))
    ratios = [x / y for x, y in zip(times["approved"], times["default"], strict=True)]
    return {"approved_ms": statistics.median(times["approved"]), "default_ms": statistics.median(times["default"]),
            "ratio": statistics.geometric_mean(ratios), "rounds": times}


def _match(store: Any, kernel: str) -> str | None:
    selection = store.select(kernel)
    return selection.match.describe() if selection.match else None


def apply_main(directory: Path, key: Path, spec_path: Path, out: Path, local: bool) -> None:
    from workers.runtime import ArtifactStore

    spec = json.loads(spec_path.read_text())
    store = ArtifactStore.load(directory, str(key))
    run = apply_cpu if local else apply_gpu
    result = run(store, spec["baseline"], spec["dims"], spec["rounds"])
    result["imports_service"] = any(name == "service" or name.startswith("service.") for name in sys.modules)
    out.write_text(json.dumps(result, indent=2))


# -- the stack ----------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        import run_studies as rs

        self.rs, self.args, self.local = rs, args, args.local
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        rs.OUT = self.out
        self.work = Path(tempfile.mkdtemp(prefix="paretune-artifacts-"))
        self.env = rs.service_env(self.work)
        self.kernel = ("cpu", "matmul") if self.local else ("triton", "gemm_bf16")

    def start(self) -> tuple[Any, Any, str]:
        rs = self.rs
        admin = rs.cli("token", "create", "--name", "tuner", "--role", "admin", env=self.env)
        approver = rs.cli("token", "create", "--name", "reviewer", "--role", "approver", env=self.env)
        viewer = rs.cli("token", "create", "--name", "build", "--role", "viewer", env=self.env)
        worker = rs.cli("token", "create", "--name", "gpu0", "--worker", "--pool", "gpu0", env=self.env)
        rs.serve(self.work, self.env)
        measure, compile_ = rs.cpu_sets(0, 1)
        command = [sys.executable, "-m", "workers", "--server", rs.SERVER, "--pool", "gpu0", "--name", "gpu0",
                   "--cache-dir", str(self.work / "cache"), "--measure-cpus", measure, "--compile-cpus", compile_]
        command += ["--backends", "cpu"] if self.local else ["--gpu", "0", "--warm"]
        rs.spawn(command, env={**self.env, "PARETUNE_WORKER_TOKEN": worker}, cwd=REPO,
                 stdout=open(self.work / "worker.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        return rs.Api(admin), rs.Api(approver), viewer

    def wait(self, what: str, check: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1.0)
        raise SystemExit(f"timed out waiting for {what}; logs in {self.work}")

    def run(self) -> dict[str, Any]:
        rs, args = self.rs, self.args
        tuner, reviewer, viewer = self.start()
        backend, builtin = self.kernel
        study = tuner.post("/v1/studies", {
            "name": f"{builtin}: artifact end to end", "kernel": {"backend": backend, "builtin": builtin},
            "objectives": ["runtime_ms", "latency_ms"], "budget": {"max_trials": args.trials}, "parallelism": 2,
            "pool": "gpu0", "sampler": {"name": "nsga2", "seed": 11, "options": {"population_size": 6}},
            "measure": LOCAL_MEASURE if self.local else GPU_MEASURE,
            "limits": {"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
        })
        rs.log(f"study {study['id']} created")
        self.wait("the study", lambda: rs.finished(tuner.get(f"/v1/studies/{study['id']}")), args.study_timeout_s)
        trials = rs.all_trials(tuner, study["id"])
        completed = [t for t in trials if t["state"] == "completed" and not t["is_baseline"]]
        best = min(completed, key=lambda t: t["values"]["runtime_ms"])
        rs.log(f"best of {len(completed)}: trial {best['number']} {best['config']} {best['values']}")

        promoted = tuner.post(f"/v1/studies/{study['id']}/candidates",
                              {"trials": [best["number"]], "rounds": args.rounds, "note": "fastest hot runtime"})
        candidate_id = promoted["candidates"][0]["id"]

        def settled() -> dict[str, Any] | None:
            detail = tuner.get(f"/v1/candidates/{candidate_id}")
            return detail if detail["state"] != "validating" else None

        detail = self.wait("the validation", settled, args.validation_timeout_s)
        rs.log(f"validation: {detail['state']}: {detail['result']['message'] if detail['result'] else ''}")
        if detail["state"] != "validated":
            raise SystemExit(f"the candidate was not validated: {json.dumps(detail)[:3000]}")
        version = reviewer.post(f"/v1/candidates/{candidate_id}/approve", {"why": "validated gain"})
        target = version["document"]["target"]
        rs.log(f"approved: artifact {version['artifact_id']} v{version['version']} sha256 {version['sha256']}")

        key = self.out / "paretune-public.pem"
        key.write_text(tuner.get("/v1/artifacts/public-key")["pem"])
        directory = self.out / "artifacts"
        directory.mkdir(exist_ok=True)
        pulled = directory / f"{builtin}.json"
        device = ["--gpu", target["cpu"]] if self.local else ["--gpu", target["gpu"], "--compute-capability",
                                                               target["compute_capability"]]
        toolchain = ",".join(f"{k}={v}" for k, v in target.items()
                             if k in ("driver", "cuda", "triton", "ptxas", "nvrtc", "cc") and v)
        pull = self.cli("artifact", "pull", builtin, *device, "--toolchain", toolchain, "-o", str(pulled),
                        "--server", rs.SERVER, "--token", viewer, "--public-key", str(key))
        verify = self.cli("artifact", "verify", str(pulled), "--public-key", str(key))
        rs.log(f"pull: {pull.stdout.strip()} | verify: {verify.stdout.strip()}")

        validation = tuner.get(f"/v1/validations/{detail['validation_id']}")
        workload = version["document"]["workload"][0]["dims"]
        spec = self.work / "apply.json"
        spec.write_text(json.dumps({"baseline": validation["baseline"], "dims": workload, "rounds": args.apply_rounds}))
        applied = self.out / "applied.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--apply", str(directory), "--key", str(key),
                   "--spec", str(spec), "--applied", str(applied)] + (["--local"] if self.local else [])
        plain = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                               env={k: v for k, v in os.environ.items() if not k.startswith("PARETUNE_")})
        if plain.returncode != 0:
            raise SystemExit(f"the plain process failed:\n{plain.stdout}\n{plain.stderr}")
        outside = json.loads(applied.read_text())
        metric = next(m for m in detail["result"]["metrics"] if m["objective"] == "runtime_ms")
        within = metric["ci_low"] <= outside["ratio"] <= metric["ci_high"]
        # the plain process's own ratio and interval, by the validation's statistics
        from service.artifacts.comparison import PairedBlock, compare

        rounds = outside["rounds"]
        mine = compare([PairedBlock(rounds["default"], rounds["approved"])], objective="runtime_ms",
                       direction="minimize", unit="ms")
        overlap = mine.ci_low is not None and mine.ci_low <= metric["ci_high"] and metric["ci_low"] <= mine.ci_high
        summary = {
            "kernel": builtin, "target": target, "best_trial": best, "artifact": {k: version[k] for k in (
                "artifact_id", "version", "sha256")}, "config": version["document"]["controls"]["config"],
            "validated_runtime_ms": metric, "outside": outside, "within_interval": within,
            "outside_interval": mine.model_dump(), "intervals_overlap": overlap,
            "pull": pull.stdout.strip(), "verify": verify.stdout.strip(), "study_id": study["id"],
            "validation": validation,
        }
        (self.out / "artifacts_e2e.json").write_text(json.dumps(summary, indent=2, default=str))
        rs.log(f"validated ratio approved/baseline {metric['ratio']:.4f} [{metric['ci_low']:.4f}, "
               f"{metric['ci_high']:.4f}] ({metric['rounds']} rounds); validated hot times: approved "
               f"{metric['candidate']:.4f} ms, baseline {metric['baseline']:.4f} ms")
        rs.log(f"plain process: approved {outside['approved_ms']:.4f} ms, baseline {outside['default_ms']:.4f} ms, "
               f"ratio {outside['ratio']:.4f}; rel error {outside['rel_l2_err']:.2e}; match: {outside['match']}")
        rs.log(f"plain process's own ratio {mine.ratio:.4f} [{mine.ci_low or 0:.4f}, {mine.ci_high or 0:.4f}] "
               f"({mine.rounds} rounds); the intervals overlap: {overlap}")
        rs.log(f"WITHIN the validation's interval: {within}")
        (self.out / "logs.txt").write_text(rs.log_tails(self.work, 30000))
        return summary

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                              env=self.env, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"paretune {' '.join(args[:2])} failed: {done.stdout}{done.stderr}")
        return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=10, help="validation rounds")
    parser.add_argument("--apply-rounds", type=int, default=10, help="rounds in the plain process")
    parser.add_argument("--study-timeout-s", type=float, default=900)
    parser.add_argument("--validation-timeout-s", type=float, default=600)
    parser.add_argument("--local", action="store_true", help="the cpu backend's matmul instead of the GPU GEMM")
    parser.add_argument("--apply", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--applied", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.apply is not None:
        apply_main(args.apply, args.key, args.spec, args.applied, args.local)
        return
    if not args.out:
        parser.error("give the output directory")
    summary = Run(args).run()
    if not summary["outside"]["correct"]:
        sys.exit("the approved configuration gave a wrong result outside the service")


if __name__ == "__main__":
    main()
