"""The python backend: the study's objective is an importable `module:function(config)`
returning metrics, the model of CompileIQ's and Optuna's objective functions.

The function returns a dict of objective name -> a number, a list of samples (summarised
into median and confidence interval), or a Metric-like dict ({"value": ..., "unit": ...}).
It runs inside the trial sandbox like any kernel, so it may crash or hang safely; an
exception fails the trial with reason `error` and the traceback.
Kernel options: "path" (a directory, or list of them, prepended to sys.path).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.backends.base import Backend, CheckOutcome, CompiledKernel, TrialFailure
from workers.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from workers.kernels import get_builtin
from workers.measure.stats import summarize


def _target(kernel: KernelSpec) -> str:
    if kernel.builtin:
        builtin = get_builtin("python", kernel.builtin)
        if builtin is None or not builtin.entry:
            raise TrialFailure(
                FailureReason.UNSUPPORTED, f"no built-in python objective {kernel.builtin!r}"
            )
        return builtin.entry
    target = kernel.source or kernel.entry or ""
    if ":" not in target:
        raise TrialFailure(
            FailureReason.ERROR,
            f"python kernel source must be 'module:function', got {target!r}",
        )
    return target


def load_objective(kernel: KernelSpec) -> Callable[[dict[str, Any]], Any]:
    paths = kernel.options.get("path", [])
    for path in [paths] if isinstance(paths, str) else paths:
        if str(path) not in sys.path:
            sys.path.insert(0, str(Path(path)))
    module_name, _, function_name = _target(kernel).partition(":")
    try:
        module = importlib.import_module(module_name)
        function = getattr(module, function_name)
    except Exception as exc:
        raise TrialFailure(
            FailureReason.ERROR,
            f"cannot load {module_name}:{function_name}: {exc}",
            traceback.format_exc(),
        ) from None
    if not callable(function):
        raise TrialFailure(FailureReason.ERROR, f"{module_name}:{function_name} is not callable")
    return function


def to_metric(name: str, value: Any, confidence: float) -> Metric:
    if isinstance(value, Metric):
        return value
    if isinstance(value, dict):
        return Metric.model_validate(value)
    if isinstance(value, list | tuple):
        return summarize([float(v) for v in value], confidence=confidence)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Metric(value=float(value))
    raise TrialFailure(
        FailureReason.ERROR,
        f"objective {name!r}: expected a number, a list of samples or a metric dict, "
        f"got {type(value).__name__}",
    )


class PythonBackend(Backend):
    name = "python"
    needs_compile = False  # nothing to build: the agent skips the compile phase

    def probe(self) -> dict[str, Any]:
        version = ".".join(map(str, sys.version_info[:3]))
        return {"available": True, "reason": "", "compilers": {"python": version}, "energy": False}

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any]) -> str:
        return ""  # never cached: nothing is built

    def compile(self, kernel: KernelSpec, config: dict[str, Any], workdir: Path) -> CompiledKernel:
        return CompiledKernel(workdir, report={"compile_s": 0.0})

    def check(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> CheckOutcome:
        load_objective(kernel)  # fail early, before the measure phase, if it cannot import
        return CheckOutcome(passed=True, details={"checked": "import only"})

    def measure(
        self,
        kernel: KernelSpec,
        config: dict[str, Any],
        built: CompiledKernel,
        objectives: list[str],
        settings: Any,
    ) -> tuple[dict[str, Metric], dict[str, Any]]:
        confidence = settings.confidence if isinstance(settings, MeasureSettings) else 0.95
        function = load_objective(kernel)
        try:
            returned = function(dict(config))
        except TrialFailure:
            raise
        except Exception as exc:
            raise TrialFailure(
                FailureReason.ERROR,
                f"the objective raised {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            ) from None
        if not isinstance(returned, dict):
            raise TrialFailure(
                FailureReason.ERROR,
                f"the objective must return a dict of metrics, got {type(returned).__name__}",
            )
        missing = [name for name in objectives if name not in returned]
        if missing:
            raise TrialFailure(
                FailureReason.ERROR,
                f"the objective returned no value for {missing} (it returned {sorted(returned)})",
            )
        metrics = {name: to_metric(name, value, confidence) for name, value in returned.items()}
        return metrics, {}
