"""Where a warm runner's first Triton compiles go, on the GPU: fresh processes, each warmed up
as a compile runner is and then compiling configurations of the built-in bf16 GEMM 4096^3 one
after the other, each in a job directory and TRITON_CACHE_DIR of its own, as the worker's
runners do (workers.sandbox.jobs).

Warm-ups (`--modes`, by default `gpu,runner`), alternating, `--rounds` processes each:
- `gpu`: workers.backends.gpu_loader.warm_up_gpu alone (imports, the CUDA context, cuBLAS, NVML);
- `runner`: the Triton backend's warm-up of a compile runner (that, then what a runner's first
  compile would pay: workers.backends.triton_warm);
- `run` (with `--modes`): the backend's warm-up of a run-phase runner, which compiles nothing.

Each compile is timed, with the host C compiler's builds within it (Triton's `_build`: the
`cuda_utils` module and a kernel's launcher) counted and timed, and the steps of the backend's
compile (resolving the configuration, the device's limits, the controls, loading the kernel's
module, Triton's loading of the compiled kernel) timed apart.

    python3 bench/gpu/first_compile.py OUT [--rounds 2] [--configs 5] [--modes gpu,runner]

Prints a table and writes OUT/first_compile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

MODES = ("gpu", "runner", "run")


def child(mode: str, configs: int, out: Path) -> None:
    started = time.perf_counter()
    from sweep import space_points

    from wire.contract import KernelSpec
    from wire.failures import TrialFailure
    from wire.kernels import get_builtin
    from workers.backends import get_backend
    from workers.backends.gpu_loader import warm_up_gpu

    backend = get_backend("triton")
    imported = time.perf_counter()
    if mode == "gpu":
        warm_up_gpu()
    else:
        backend.warm_up("run" if mode == "run" else "compile")
    warmed = time.perf_counter()

    import triton.runtime.build as build

    builds: list[tuple[str, float]] = []
    original = build._build

    def timed_build(name: str, *args: Any, **kwargs: Any) -> Any:
        begun = time.perf_counter()
        try:
            return original(name, *args, **kwargs)
        finally:
            builds.append((name, time.perf_counter() - begun))

    build._build = timed_build
    # the steps of the backend's compile, timed where they are looked up (the backend module's
    # names and Triton's loading of a compiled kernel, which builds its launcher)
    import triton.compiler.compiler as triton_compiler
    import triton.runtime.jit

    import workers.backends.triton_backend as triton_backend

    steps: dict[str, float] = {}

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            begun = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                steps[name] = steps.get(name, 0.0) + time.perf_counter() - begun
        return wrapper

    for name in ("resolve", "refuse_unlaunchable", "local_device_limits", "applied_controls", "triton_ptxas",
                 "jit_of", "meta_parameters", "kernel_info", "refuse_compiled"):
        if hasattr(triton_backend, name):
            setattr(triton_backend, name, timed(name, getattr(triton_backend, name)))
    load_module = timed("load_module", triton_backend.load_module)

    def loaded_with_timed_inputs(*args: Any, **kwargs: Any) -> Any:
        module = load_module(*args, **kwargs)
        if hasattr(module, "make_inputs"):  # the kernel's inputs, made on the meta device to compile
            module.make_inputs = timed("make_inputs", module.make_inputs)
        return module

    triton_backend.load_module = loaded_with_timed_inputs
    kernel_class = triton_compiler.CompiledKernel
    kernel_class._init_handles = timed("init_handles", kernel_class._init_handles)
    jit_class = triton.runtime.jit.JITFunction
    jit_class.warmup = timed("jit_warmup", jit_class.warmup)  # Triton's compile of the kernel
    builtin = get_builtin("triton", "gemm_bf16")
    assert builtin is not None
    spec = KernelSpec.model_validate({"backend": "triton", "builtin": "gemm_bf16"})
    points = space_points(builtin.space)
    random.Random(11).shuffle(points)
    rows = []
    root = Path(tempfile.mkdtemp(prefix="first-compile-"))
    for index, config in enumerate(points):
        if len(rows) == configs:
            break
        job = root / f"job{index}"  # a configuration refused before compiling leaves its directory
        job.mkdir()
        os.environ["TRITON_CACHE_DIR"] = str(job / "build" / "triton-cache")
        builds.clear()
        steps.clear()
        begun = time.perf_counter()
        try:
            backend.compile(spec, config, job / "build")
        except TrialFailure as failure:
            if failure.reason.value == "infeasible" and "refused before compiling" in failure.message:
                continue  # refused by the resource model: no compile to time
            rows.append({"config": config, "failed": failure.message[:200], "compile_s": time.perf_counter() - begun})
            continue
        rows.append({
            "config": config,
            "compile_s": time.perf_counter() - begun,
            "c_builds": [{"module": name, "s": seconds} for name, seconds in builds],
            "steps": dict(steps),
        })
    out.write_text(json.dumps({
        "mode": mode, "import_s": imported - started, "warm_up_s": warmed - imported, "compiles": rows}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", type=int, default=5)
    parser.add_argument("--modes", default="gpu,runner")
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--child-out")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.configs, Path(args.child_out))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for round_ in range(args.rounds):
        for mode in args.modes.split(","):
            target = out / f"{mode}_{round_}.json"
            started = time.perf_counter()
            child_run = subprocess.run([sys.executable, __file__, str(out), "--child", mode, "--child-out",
                                        str(target), "--configs", str(args.configs)], timeout=300)
            if child_run.returncode != 0:
                print(f"{mode} round {round_}: the process exited with {child_run.returncode}", file=sys.stderr)
                continue
            run = json.loads(target.read_text())
            run["process_s"] = time.perf_counter() - started
            run["round"] = round_
            runs.append(run)
    (out / "first_compile.json").write_text(json.dumps(runs, indent=1))
    print(f"{'warm-up':8} {'round':>5} {'import s':>8} {'warm-up s':>9}  compiles s (C builds: module s)")
    for run in runs:
        cells = []
        for row in run["compiles"]:
            glue = ", ".join(f"{b['module'].lstrip('_')[:8]} {b['s']:.2f}" for b in row.get("c_builds", []))
            failed = " failed" if "failed" in row else ""
            cells.append(f"{row['compile_s']:.2f}" + (f" ({glue})" if glue else "") + failed)
        print(f"{run['mode']:8} {run['round']:>5} {run['import_s']:8.2f} {run['warm_up_s']:9.2f}  " + "; ".join(cells))
        for index, row in enumerate(run["compiles"][:2]):
            ranked = sorted(row.get("steps", {}).items(), key=lambda kv: -kv[1])
            timed_steps = ", ".join(f"{k} {v:.2f}" for k, v in ranked)
            print(f"{'':24}compile {index}: {timed_steps}")
    for mode in args.modes.split(","):
        firsts = [run["compiles"][0]["compile_s"] for run in runs if run["mode"] == mode and run["compiles"]]
        later = [row["compile_s"] for run in runs if run["mode"] == mode for row in run["compiles"][1:]]
        if firsts and later:
            print(f"{mode}: first compile median {statistics.median(firsts):.2f} s,"
                  f" later {statistics.median(later):.2f} s")


if __name__ == "__main__":
    main()
