"""The cpu backend: a C kernel built with the system compiler into a shared library under
the trial's flags, loaded with ctypes, checked against a numpy reference and timed on the host.
The C source is a built-in's, the study's, or that of a kernel object of an installed package
(`module: package.path:function`, its `src` and `__name__`, as a Triton JIT function carries
them): the cpu stand-in of a third-party Triton kernel.

Configuration keys (all optional):
  opt            "-O0" .. "-O3", "-Os", "-Ofast"
  march_native   -march=native -mtune=native
  unroll         -funroll-loops (False: -fno-unroll-loops)
  vectorize      -ftree-vectorize (False: -fno-tree-vectorize)
  fast_math      -ffast-math
  inline_limit   -finline-limit=N
  cflags         extra flags, one string
  UPPER_CASE     a macro of the kernel, passed as -DNAME=value (booleans as 1/0)
Kernel options: "problem" (matmul | stencil: the calling convention and the reference),
"tolerance" (overrides the problem's), "cflags" (list of extra flags for every trial).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from wire.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from wire.failures import TrialFailure
from wire.kernels import get_builtin
from wire.modules import identity_text, module_target
from wire.options import cpu_flags as flags_for
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.backends.cpu_problems import Case, Problem, get_problem
from workers.backends.modules import identity as module_identity
from workers.backends.modules import import_kernel, kernel_source
from workers.fingerprint import cpu_model
from workers.measure import rapl, timing
from workers.measure.stats import summarize

_BASE_FLAGS = ["-shared", "-fPIC", "-std=gnu11"]
SUPPORTED_OBJECTIVES = (
    "runtime_ms",
    "latency_ms",
    "p99_ms",
    "compile_s",
    "energy_mj",
    "power_w",
    "gflops",
)


def resolve(kernel: KernelSpec) -> tuple[str, str, Problem, dict[str, Any]]:
    """(C source, entry symbol, problem, options) of a built-in or user kernel."""
    options = dict(kernel.options)
    if kernel.builtin:
        builtin = get_builtin("cpu", kernel.builtin)
        if builtin is None:
            raise TrialFailure(
                FailureReason.UNSUPPORTED, f"no built-in cpu kernel {kernel.builtin!r}"
            )
        source, entry = builtin.read_source(), kernel.entry or builtin.entry
        options = {**builtin.options, **options}
    elif kernel.source:
        source, entry = kernel.source, kernel.entry
    elif (target := module_target(kernel)) is not None:
        found = import_kernel(target)
        source, entry = kernel_source(found, target), getattr(found, "__name__", None) or target.partition(":")[2]
    else:
        raise TrialFailure(FailureReason.ERROR, "a cpu kernel needs `builtin`, `source` or `module`")
    problem_name = options.get("problem") or entry
    try:
        problem = get_problem(str(problem_name))
    except KeyError as exc:
        raise TrialFailure(FailureReason.UNSUPPORTED, str(exc.args[0])) from None
    return source, entry or problem.name, problem, options


class CpuBackend(Backend):
    name = "cpu"

    @cached_property
    def compiler(self) -> str | None:
        return shutil.which(os.environ.get("CC", "cc"))

    @cached_property
    def compiler_version(self) -> str:
        if not self.compiler:
            return ""
        try:
            out = subprocess.run(
                [self.compiler, "--version"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.splitlines()[0].strip() if out else ""

    def probe(self) -> dict[str, Any]:
        if not self.compiler or not self.compiler_version:
            return {
                "available": False,
                "reason": "no working C compiler (cc) on PATH",
                "energy": False,
            }
        return {
            "available": True,
            "reason": "",
            "compilers": {"cc": self.compiler_version},
            "energy": rapl.available(),
            "objectives": list(SUPPORTED_OBJECTIVES),
        }

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        if module_target(kernel):  # not imported in the agent: its reference and package version
            source, entry, options = identity_text(kernel), kernel.entry, dict(kernel.options)
        else:
            source, entry, _, options = resolve(kernel)
        identity = {
            **module_identity(kernel),
            "backend": self.name,
            "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
            "entry": entry,
            "config": config,
            "cflags": options.get("cflags", []),
            "cc": self.compiler_version,
            # -march=native means "this CPU": the same flags build different code elsewhere
            "machine": platform.machine(),
            "cpu": cpu_model() if config.get("march_native") else "",
        }
        blob = json.dumps(identity, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def compile(
        self, kernel: KernelSpec, config: dict[str, Any], workdir: Path, compile_only: bool = False
    ) -> CompiledKernel:
        if not self.compiler:
            raise TrialFailure(FailureReason.UNSUPPORTED, "no C compiler (cc) on this worker")
        source, entry, problem, options = resolve(kernel)
        flags = [*_BASE_FLAGS, *flags_for(config), *map(str, options.get("cflags", []))]
        (workdir / "kernel.c").write_text(source)
        command = [self.compiler, *flags, "-o", "kernel.so", "kernel.c", "-lm"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        compile_s = time.perf_counter() - started
        log = done.stdout + done.stderr
        if done.returncode != 0:
            raise TrialFailure(
                FailureReason.COMPILE_ERROR, f"cc exited with status {done.returncode}", log
            )
        report = {
            "command": shlex.join(command),
            "flags": flags,
            "cc": self.compiler_version,
            "compile_s": compile_s,
            "warnings": log.count("warning:"),
            "library_bytes": (workdir / "kernel.so").stat().st_size,
            "entry": entry,
            "problem": problem.name,
            **module_identity(kernel),
        }
        return CompiledKernel(workdir, {"library": "kernel.so", "source": "kernel.c"}, report, log)

    def _load(self, kernel: KernelSpec, built: CompiledKernel) -> tuple[Any, Problem, dict]:
        _, entry, problem, options = resolve(kernel)
        library = ctypes.CDLL(str(built.directory / built.files["library"]))
        try:
            fn = getattr(library, entry)
        except AttributeError:
            raise TrialFailure(
                FailureReason.ERROR, f"the library exports no function {entry!r} ({problem.abi})"
            ) from None
        return fn, problem, options

    def _shapes(self, kernel: KernelSpec, problem: Problem) -> list[tuple[dict[str, int], float]]:
        workload = kernel.workload
        if not workload and kernel.builtin:
            builtin = get_builtin("cpu", kernel.builtin)
            workload_dicts = builtin.workload if builtin else []
            pairs = [(w["dims"], float(w.get("weight", 1.0))) for w in workload_dicts]
        else:
            pairs = [(w.dims, w.weight) for w in workload]
        if not pairs:
            raise TrialFailure(FailureReason.ERROR, "the kernel's workload names no shape")
        try:
            return [(problem.shape(dims), weight) for dims, weight in pairs]
        except ValueError as exc:
            raise TrialFailure(FailureReason.ERROR, str(exc)) from None

    def check(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> CheckOutcome:
        fn, problem, options = self._load(kernel, built)
        tolerance = float(options.get("tolerance", problem.tolerance))
        seed = int.from_bytes(os.urandom(4), "little")
        rng = np.random.default_rng(seed)
        shapes = [dims for dims, _ in self._shapes(kernel, problem)] + problem.edge_shapes()
        worst = 0.0
        per_shape = []
        for dims in shapes:
            case = problem.case(fn, dims, rng)
            case.call()
            expected = case.reference()
            error = float(np.max(np.abs(case.output.astype(np.float64) - expected)))
            scale = max(float(np.max(np.abs(expected))), 1.0)
            relative = error / scale if np.isfinite(error) else float("inf")
            worst = max(worst, relative)
            per_shape.append({"dims": dims, "max_abs_err": error, "rel_err": relative})
        details = {"seed": seed, "tolerance": tolerance, "rel_err": worst, "shapes": per_shape}
        return CheckOutcome(passed=worst <= tolerance, details=details)

    def measure(
        self,
        kernel: KernelSpec,
        config: dict[str, Any],
        built: CompiledKernel,
        objectives: list[str],
        settings: Any,
    ) -> tuple[dict[str, Metric], dict[str, Any]]:
        settings = settings if isinstance(settings, MeasureSettings) else MeasureSettings()
        unknown = [o for o in objectives if o not in SUPPORTED_OBJECTIVES]
        if unknown:
            raise TrialFailure(
                FailureReason.UNSUPPORTED,
                f"the cpu backend cannot measure {unknown}; "
                f"it measures {list(SUPPORTED_OBJECTIVES)}",
            )
        wants_energy = any(o in objectives for o in ("energy_mj", "power_w"))
        meter = None
        if wants_energy:
            try:
                meter = rapl.EnergyMeter()
            except RuntimeError as exc:
                raise TrialFailure(
                    FailureReason.UNSUPPORTED, f"energy objectives need RAPL: {exc}"
                ) from None
        fn, problem, _ = self._load(kernel, built)
        rng = np.random.default_rng()
        shapes = self._shapes(kernel, problem)
        cases = [(problem.case(fn, dims, rng), weight) for dims, weight in shapes]
        series = _measure_cases(cases, objectives, settings, meter)
        metrics = _metrics(series, cases, objectives, settings, built)
        environment = _environment(series, cases)
        return metrics, environment


def _measure_cases(
    cases: list[tuple[Case, float]],
    objectives: list[str],
    settings: MeasureSettings,
    meter: rapl.EnergyMeter | None,
) -> dict[str, list[list[float]]]:
    """Per-shape sample lists by series name (hot, cold, joules, watts)."""
    series: dict[str, list[list[float]]] = {"hot": [], "cold": [], "joules": [], "watts": []}
    flusher = timing.CacheFlusher() if {"latency_ms", "p99_ms"} & set(objectives) else None
    for case, _ in cases:
        per_call = timing.warm_up(case.call, settings.warmup_s)
        series["hot"].append(timing.hot_samples(case.call, per_call, settings))
        if flusher is not None:
            series["cold"].append(timing.cold_samples(case.call, flusher, per_call, settings))
        if meter is not None:
            joules, watts = timing.energy_windows(case.call, meter, per_call, settings)
            series["joules"].append(joules)
            series["watts"].append(watts)
    if flusher is not None:
        series["flush_bytes"] = [[float(flusher.nbytes)]]
    return series


def _mix(per_shape: list[list[float]], weights: list[float]) -> list[float]:
    """Weighted mean over shapes of the r-th sample of each shape: one sample of the mix."""
    count = min(len(s) for s in per_shape)
    total = sum(weights)
    return [
        sum(w * s[r] for s, w in zip(per_shape, weights, strict=True)) / total for r in range(count)
    ]


def _metrics(
    series: dict[str, list[list[float]]],
    cases: list[tuple[Case, float]],
    objectives: list[str],
    settings: MeasureSettings,
    built: CompiledKernel,
) -> dict[str, Metric]:
    weights = [w for _, w in cases]
    conf = settings.confidence
    metrics: dict[str, Metric] = {}
    hot_ms = [t * 1e3 for t in _mix(series["hot"], weights)]
    for name in objectives:
        if name == "runtime_ms":
            metrics[name] = summarize(hot_ms, "ms", conf)
        elif name == "latency_ms":
            metrics[name] = summarize([t * 1e3 for t in _mix(series["cold"], weights)], "ms", conf)
        elif name == "p99_ms":
            cold = summarize([t * 1e3 for t in _mix(series["cold"], weights)], "ms", conf)
            metrics[name] = Metric(value=cold.stats["p99"], unit="ms", n=cold.n, stats=cold.stats)
        elif name == "compile_s":
            metrics[name] = Metric(value=float(built.report.get("compile_s", 0.0)), unit="s")
        elif name == "energy_mj":
            metrics[name] = summarize(
                [j * 1e3 for j in _mix(series["joules"], weights)], "mJ", conf
            )
        elif name == "power_w":
            metrics[name] = summarize(_mix(series["watts"], weights), "W", conf)
        elif name == "gflops":
            flops = sum(c.flops * w for c, w in cases) / sum(weights)
            metrics[name] = summarize([flops / (t * 1e-3) / 1e9 for t in hot_ms], "GFLOP/s", conf)
    return metrics


def _environment(
    series: dict[str, list[list[float]]], cases: list[tuple[Case, float]]
) -> dict[str, Any]:
    shapes = []
    for i, (case, weight) in enumerate(cases):
        hot = summarize(series["hot"][i]).value * 1e3
        entry: dict[str, Any] = {
            "dims": case.dims,
            "weight": weight,
            "hot_ms": hot,
            "hot_n": len(series["hot"][i]),
        }
        if series["cold"]:
            entry["cold_ms"] = summarize(series["cold"][i]).value * 1e3
        shapes.append(entry)
    environment: dict[str, Any] = {
        "shapes": shapes,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_mhz": _cpu_mhz(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    if "flush_bytes" in series:
        environment["cold_flush_bytes"] = int(series["flush_bytes"][0][0])
    return environment


def _cpu_mhz() -> float | None:
    """Current clock of the first CPU this process runs on, where the kernel exposes it."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    path = Path(f"/sys/devices/system/cpu/cpu{cpus[0]}/cpufreq/scaling_cur_freq")
    try:
        return int(path.read_text()) / 1000.0
    except (OSError, ValueError):
        return None
