"""The python backend: the study's objective is a function `f(config)` returning metrics,
the model of CompileIQ's and Optuna's objective functions. Either inline source (`source`
holds the code, `entry` names the function), written into the trial's job directory and
imported from there, or an importable `module:function` (`source`, or `entry`).

The function returns a dict of objective name -> a number, a list of samples (summarised
into median and confidence interval), or a Metric-like dict ({"value": ..., "unit": ...}).
It runs inside the trial sandbox like any kernel, so it may crash or hang safely; an
exception fails the trial with reason `error` and the traceback.
Kernel options: "path" (a directory, or list of them, prepended to sys.path), allowed only
inside the directories the worker's operator offers (`--python-path`, in
PARETUNE_PYTHON_PATHS): a study cannot make the sandbox import from elsewhere on the worker.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from wire.contract import FailureReason, KernelSpec, MeasureSettings, Metric
from wire.failures import TrialFailure
from wire.kernels import get_builtin
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.measure.stats import summarize
from workers.sandbox.limits import current, explain_exception

PYTHON_PATHS_ENV = "PARETUNE_PYTHON_PATHS"
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_inline(kernel: KernelSpec) -> bool:
    """Whether `source` is the objective's code rather than a `module:function` name."""
    return kernel.source is not None and not _TARGET.match(kernel.source.strip())


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


def allowed_paths() -> list[str]:
    return [os.path.realpath(p) for p in os.environ.get(PYTHON_PATHS_ENV, "").split(os.pathsep) if p]


def _add_paths(kernel: KernelSpec) -> None:
    """kernel.options.path onto sys.path, each inside a directory the worker offers."""
    paths = kernel.options.get("path", [])
    allowed = allowed_paths()
    for path in [paths] if isinstance(paths, str) else paths:
        real = os.path.realpath(str(path))
        if not any(real == root or real.startswith(root + os.sep) for root in allowed):
            offered = ", ".join(allowed) or "none (it was started without --python-path)"
            raise TrialFailure(
                FailureReason.ERROR,
                f"kernel.options.path: {path} is not inside a directory this worker offers ({offered}); "
                "send the objective as inline source (kernel.source with kernel.entry), or ask the "
                "worker's operator to offer the directory with --python-path",
            )
        if real not in sys.path:
            sys.path.insert(0, real)


def _inline_module(kernel: KernelSpec, directory: Path) -> Any:
    """The module of inline source, written into the job directory and imported from there;
    the same source in a later trial of a warm runner is the same module."""
    assert kernel.source is not None
    name = "paretune_objective_" + hashlib.sha256(kernel.source.encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(kernel.source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_objective(kernel: KernelSpec, directory: Path | None = None) -> Callable[[dict[str, Any]], Any]:
    """The objective function; inline source is written into `directory` (the job's)."""
    _add_paths(kernel)
    inline = is_inline(kernel)
    if inline and not kernel.entry:
        raise TrialFailure(FailureReason.ERROR, "inline python source needs kernel.entry, the function to call")
    module_name, _, function_name = ("<inline>", "", kernel.entry or "") if inline else _target(kernel).partition(":")
    try:
        module = _inline_module(kernel, directory or Path.cwd()) if inline else importlib.import_module(module_name)
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
    try:
        if isinstance(value, Metric):
            return value
        if isinstance(value, dict):
            return Metric.model_validate(value)
        if isinstance(value, list | tuple):
            return summarize([float(v) for v in value], confidence=confidence)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return Metric(value=float(value))
    except (ValidationError, ValueError, TypeError) as exc:
        raise TrialFailure(FailureReason.ERROR, f"objective {name!r}: {exc}") from None
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

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        return ""  # never cached: nothing is built

    def compile(
        self, kernel: KernelSpec, config: dict[str, Any], workdir: Path, compile_only: bool = False
    ) -> CompiledKernel:
        return CompiledKernel(workdir, report={"compile_s": 0.0})

    def check(
        self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel
    ) -> CheckOutcome:
        load_objective(kernel, built.directory)  # fail early, before the measure phase, if it cannot import
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
        function = load_objective(kernel, built.directory)
        try:
            returned = function(dict(config))
        except TrialFailure:
            raise
        except Exception as exc:
            raise TrialFailure(
                FailureReason.ERROR,
                explain_exception(exc, current()) or f"the objective raised {type(exc).__name__}: {exc}",
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
