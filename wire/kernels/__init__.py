"""Registry of built-in example kernels, each with a baseline configuration and a search space
of typed parameters (wire.space, the models a study document's space is validated with).

A study names a built-in by (backend, name); the worker resolves its source from here, so
the trial spec carries only the name. GPU built-ins live in wire.kernels.gpu, which is
imported lazily and may be absent on a CPU-only install.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wire.space import (
    BoolParam,
    CategoricalParam,
    IntParam,
    Parameter,
    check_names,
    param_default,
    value_problem,
)

if TYPE_CHECKING:
    from wire.contract import DeviceLimits
    from wire.kernels.resources import ResourceModel, Violation
    from wire.kernels.structure import StructureModel

log = logging.getLogger(__name__)

KERNELS_DIR = Path(__file__).resolve().parent


@dataclass
class BuiltinKernel:
    name: str
    backend: str
    source_file: str | None  # relative to workers/kernels/
    entry: str | None
    default_config: dict[str, Any]  # the baseline: a point of the space
    space: list[Parameter]
    workload: list[dict[str, Any]]
    description: str
    options: dict[str, Any] = field(default_factory=dict)  # backend settings, e.g. the problem
    # how each workload dim may vary in a validation's correctness shapes (free when absent;
    # fixed, power_of_2, multiple_of:N): see workers.validation.shapes
    shape_rules: dict[str, str] = field(default_factory=dict)
    # what one thread block of a configuration uses on a GPU (wire.kernels.resources)
    resources: ResourceModel | None = None
    # features of a configuration's structure and a prior over them (wire.kernels.structure)
    structure: StructureModel | None = None

    def __post_init__(self) -> None:
        check_names(self.space)
        problem = self._baseline_problem()
        if problem:
            raise ValueError(f"built-in {self.backend}/{self.name}: {problem}")

    def _baseline_problem(self) -> str | None:
        """Why the baseline is not a point of the space, or a default the space gives is not
        the baseline's; None when neither."""
        unknown = sorted(self.default_config.keys() - {p.name for p in self.space})
        if unknown:
            return f"the baseline names {', '.join(unknown)}, not parameters of the space"
        for param in self.space:
            if param.name not in self.default_config:
                return f"the baseline has no value for {param.name}"
            value = self.default_config[param.name]
            problem = value_problem(param, value)
            if problem:
                return f"the baseline's {param.name}: {problem}"
            default = param_default(param)
            if default is not None and default != value:
                return f"the space's default {param.name}={default!r} is not the baseline's {value!r}"
        return None

    def source_path(self) -> Path | None:
        return KERNELS_DIR / self.source_file if self.source_file else None

    def read_source(self) -> str:
        path = self.source_path()
        if path is None:
            raise ValueError(f"built-in kernel {self.backend}/{self.name} has no source file")
        return path.read_text()


BUILTINS: dict[tuple[str, str], BuiltinKernel] = {}
_gpu_loaded = False
_gpu_lock = threading.RLock()  # re-entrant: the import registers through this module


def register(kernel: BuiltinKernel) -> None:
    BUILTINS[(kernel.backend, kernel.name)] = kernel


def get_builtin(backend: str, name: str) -> BuiltinKernel | None:
    _load_gpu_builtins()
    return BUILTINS.get((backend, name))


def resource_violations(backend: str, name: str, config: dict[str, Any], shapes: list[dict[str, int]],
                        limits: DeviceLimits) -> list[Violation]:
    """The device limits the built-in `name` under `config` (its defaults filling the rest)
    is over on any of `shapes`; empty when it fits or the built-in declares no model."""
    from wire.kernels.resources import check

    builtin = get_builtin(backend, name)
    if builtin is None or builtin.resources is None:
        return []
    try:
        return check(builtin.resources, {**builtin.default_config, **config}, shapes, limits)
    except (KeyError, TypeError, ValueError):  # a shape or value the model cannot read: the compiler decides
        return []


def all_builtins() -> list[BuiltinKernel]:
    _load_gpu_builtins()
    return list(BUILTINS.values())


def _load_gpu_builtins() -> None:
    """Register the GPU built-ins once; a thread that asks while another imports them waits
    for it (a worker's compilers look up their first trials' kernels at the same moment)."""
    global _gpu_loaded
    if _gpu_loaded:
        return
    with _gpu_lock:
        if _gpu_loaded:
            return
        try:
            importlib.import_module("wire.kernels.gpu")
        except ImportError as exc:
            log.debug("no GPU built-in kernels: %s", exc)
        _gpu_loaded = True


def with_defaults(space: list[Parameter], defaults: dict[str, Any]) -> list[Parameter]:
    """The space with each parameter's `default` set to the baseline's value."""
    return [param.model_copy(update={"default": defaults[param.name]}) if param.name in defaults else param
            for param in space]


_CPU_FLAGS_SPACE: list[Parameter] = [
    CategoricalParam(name="opt", type="categorical", choices=["-O1", "-O2", "-O3", "-Ofast"]),
    BoolParam(name="march_native", type="bool"),
    BoolParam(name="unroll", type="bool"),
    BoolParam(name="vectorize", type="bool"),
    IntParam(name="inline_limit", type="int", low=50, high=1000, step=50),
]
_CPU_FLAGS_DEFAULT: dict[str, Any] = {
    "opt": "-O2",
    "march_native": False,
    "unroll": False,
    "vectorize": True,
    "inline_limit": 600,
}

_MATMUL_DEFAULT = {**_CPU_FLAGS_DEFAULT, "TILE_M": 16, "TILE_N": 64, "TILE_K": 64}
_STENCIL_DEFAULT = {**_CPU_FLAGS_DEFAULT, "TILE_I": 32, "TILE_J": 256}

register(
    BuiltinKernel(
        name="matmul",
        backend="cpu",
        source_file="cpu/matmul.c",
        entry="matmul",
        default_config=_MATMUL_DEFAULT,
        space=with_defaults(
            [
                *_CPU_FLAGS_SPACE,
                IntParam(name="TILE_M", type="int", low=4, high=128, step=4),
                IntParam(name="TILE_N", type="int", low=16, high=512, step=16),
                IntParam(name="TILE_K", type="int", low=16, high=512, step=16),
            ],
            _MATMUL_DEFAULT,
        ),
        workload=[{"dims": {"n": 256}, "weight": 1.0}],
        description=(
            "Tiled single-precision matrix multiply C = A @ B (row-major, i-k-j loop order). "
            "Tile sizes are compile-time macros; -O level, -march=native, unrolling, "
            "vectorisation and the inline limit are compiler flags."
        ),
        options={"problem": "matmul"},
    )
)

register(
    BuiltinKernel(
        name="stencil",
        backend="cpu",
        source_file="cpu/stencil.c",
        entry="stencil",
        default_config=_STENCIL_DEFAULT,
        space=with_defaults(
            [
                *_CPU_FLAGS_SPACE,
                IntParam(name="TILE_I", type="int", low=4, high=256, step=4),
                IntParam(name="TILE_J", type="int", low=32, high=2048, step=32),
            ],
            _STENCIL_DEFAULT,
        ),
        workload=[{"dims": {"n": 1024, "m": 1024, "steps": 4}, "weight": 1.0}],
        description=(
            "Tiled 2-D five-point Jacobi stencil (single precision, fixed boundary), "
            "`steps` sweeps. Tile sizes are compile-time macros; the flags are as for matmul."
        ),
        options={"problem": "stencil"},
        shape_rules={"steps": "fixed"},
    )
)
