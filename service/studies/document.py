"""The study document: what a platform team sends to start a tuning study.

Validation lives here so that every mistake is reported with the field that holds it and
what is allowed there (the API turns these into 422 responses). Every field is bounded in
size, count and depth, so that no document can make the service materialise something
large: limits are listed in docs/api.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from cachetools import LRUCache
from pydantic import Field, field_serializer, field_validator, model_validator

from service.studies.limits import MAX_DEPTH
from service.studies.space import MAX_GRID_POINTS, MAX_PARAMETERS, SearchSpace
from service.trials.fairshare import Priority
from wire.contract import COMPILE_METRICS, DeviceLimits, KernelSpec, MeasureSettings, SandboxLimits, WorkloadShape
from wire.modules import is_module_target
from wire.space import MAX_STRING, NAME_RE, Parameter, Scalar, StrictModel, param_default, value_problem

if TYPE_CHECKING:
    from service.store.models import Study

Direction = Literal["minimize", "maximize"]
# name -> (default direction, unit, meaning)
KNOWN_OBJECTIVES: dict[str, tuple[Direction, str, str]] = {
    "runtime_ms": ("minimize", "ms", "hot time per call (back-to-back calls)"),
    "latency_ms": ("minimize", "ms", "median cold per-call latency"),
    "p99_ms": ("minimize", "ms", "99th percentile of cold per-call latency"),
    "energy_mj": ("minimize", "mJ", "energy per call in the hot window"),
    "power_w": ("minimize", "W", "average power in the hot window"),
    # per token of the workload's mix (wire.per_token): from runtime_ms and energy_mj
    "time_per_token_us": ("minimize", "us", "hot time per token of the traffic mix"),
    "energy_per_token_mj": ("minimize", "mJ", "energy per token of the traffic mix"),
    "tokens_per_joule": ("maximize", "tokens/J", "tokens per joule of the traffic mix"),
    **{name: ("minimize", unit, meaning) for name, (unit, meaning) in COMPILE_METRICS.items()},
}
ENERGY_OBJECTIVES = {"energy_mj", "power_w", "energy_per_token_mj", "tokens_per_joule"}
BACKENDS = ("cpu", "python", "triton", "cuda", "ptx")
GPU_BACKENDS = frozenset({"triton", "cuda"})  # backends whose trials run on a GPU
COMPILE_ONLY_BACKENDS = ("triton", "ptx")  # backends that build for a target without running
SAMPLERS = ("nsga2", "nsga3", "tpe", "gp", "random", "grid", "compileiq", "lfbo")
MAX_PARALLELISM = 1_000
MAX_OPTION_KEYS = 64
MAX_WALL_TIME_S = 90 * 86_400.0
# infeasible proposals in a row after which a study fails: a sampler that has proposed this
# many configurations that cannot launch, one after another, is not finding the rest
DEFAULT_INFEASIBLE_IN_A_ROW = 50

ShortText = Annotated[str, Field(max_length=MAX_STRING)]
MAX_WARM_STUDIES = 20
MAX_WARM_CONFIGS = 100


class Objective(StrictModel):
    name: ShortText
    direction: Direction | None = None


class Constraint(StrictModel):
    metric: ShortText
    op: Literal["<=", ">="]
    value: float


class Kernel(StrictModel):
    backend: str
    builtin: str | None = Field(default=None, max_length=100)
    source: str | None = Field(default=None, max_length=500_000)
    entry: str | None = Field(default=None, max_length=200)
    # package.path:function of a package installed on the workers (wire.modules)
    module: str | None = Field(default=None, max_length=200)
    workload: list[WorkloadShape] = Field(default_factory=list, max_length=1000)
    options: dict[ShortText, Any] = Field(default_factory=dict, max_length=MAX_OPTION_KEYS)

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}; use one of {', '.join(BACKENDS)}")
        return value

    @model_validator(mode="after")
    def _what(self) -> Kernel:
        if [bool(self.builtin), bool(self.source), bool(self.module)].count(True) != 1:
            raise ValueError("name exactly one of builtin (a built-in kernel), source or module (package.path:function "
                             "of a package installed on the workers)")
        if self.module is not None:
            _check_module(self)
        return self


def _check_module(kernel: Kernel) -> None:
    if not is_module_target(kernel.module):
        raise ValueError(f"module {kernel.module!r}: write package.path:function, e.g. "
                         "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel")
    if kernel.entry is not None:
        raise ValueError("module names the kernel's function: leave entry out")
    if kernel.backend not in ("cpu", "triton"):
        raise ValueError(f"module kernels run on the triton backend (a Triton JIT function) or on the cpu backend "
                         f"(a cpu stand-in of the same shape), not {kernel.backend!r}"
                         + ("; a python objective names its module:function in source" if kernel.backend == "python"
                            else ""))
    if kernel.backend == "triton" and not (kernel.options.get("harness_source") or kernel.options.get("harness")):
        raise ValueError("a Triton kernel given by module needs its harness (make_inputs, arguments, grid, output, "
                         "reference, DTYPE): options.harness_source (its text) or options.harness (a module name)")
    if kernel.backend == "cpu" and not kernel.options.get("problem"):
        raise ValueError("a cpu kernel given by module needs options.problem: the calling convention and reference "
                         "it implements (rmsnorm, swiglu, matmul, stencil)")


class WarmStart(StrictModel):
    """Configurations measured right after the baseline, before the sampler proposes: the
    front of earlier studies of the same kernel (other shapes, an older toolchain), best
    first, and configurations given here. A parameter a configuration leaves out takes the
    baseline's value."""

    studies: list[Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(default_factory=list,
                                                                    max_length=MAX_WARM_STUDIES)
    trials: int = Field(default=4, ge=0, le=MAX_WARM_CONFIGS)  # at most this many from `studies`
    configs: list[dict[ShortText, Scalar]] = Field(default_factory=list, max_length=MAX_WARM_CONFIGS)


WarmStartMode = Literal["related", "catalog", "none"]


class WarmSource(StrictModel):
    """A related study's trial that a study started from (warm_start: related)."""

    study: int
    trial: int  # its number in that study
    team: bool  # whether that study is of the same team (else its owners share its trials)
    workload: list[WorkloadShape]
    target: dict[str, str | None]  # the device and toolchain of the worker that measured it
    distance: float  # the shape and target distance (service.studies.transfer)
    values: dict[str, float]  # what it measured there


class LearnedFrom(StrictModel):
    """A related study whose completed trials the study's `lfbo` sampler learns from
    (warm_start: related; service.studies.transfer.learning_set)."""

    study: int
    team: bool  # whether that study is of the same team (else its owners share its trials)
    workload: list[WorkloadShape]
    target: dict[str, str | None]  # the device and toolchain of the worker that measured most of them
    distance: float  # the shape and target distance (service.studies.transfer)
    configs: list[dict[str, Scalar]]  # its completed trials' configurations, best first


class Sampler(StrictModel):
    name: str = "auto"
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    options: dict[ShortText, Scalar] = Field(default_factory=dict, max_length=MAX_OPTION_KEYS)
    # numeric categorical choices shown to the sampler in ascending order (SearchSpace.sampler_view);
    # when left out: as `auto` chooses (samplers.AUTO_*), false for a named sampler
    ordered_choices: bool | None = None
    warm_start: WarmStart | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value not in (*SAMPLERS, "auto"):
            raise ValueError(f"unknown sampler {value!r}; use one of {', '.join(SAMPLERS)}")
        return value


class Budget(StrictModel):
    max_trials: int = Field(default=100, ge=1, le=1_000_000)
    max_failed_trials: int | None = Field(default=None, ge=0, le=1_000_000)  # infeasible ones aside
    wall_time_s: float | None = Field(default=None, gt=0, le=MAX_WALL_TIME_S)
    # whether trials whose configuration cannot launch (failure reason infeasible) count
    # against max_trials; either way the study fails past either cap below
    count_infeasible: bool = False
    max_infeasible: int | None = Field(default=None, ge=0, le=1_000_000)  # default: max_trials
    max_infeasible_in_a_row: int = Field(default=DEFAULT_INFEASIBLE_IN_A_ROW, ge=1, le=1_000_000)


class Target(StrictModel):
    """The GPU the study tunes for, where the pool's workers do not say (or to override
    them): a compute capability with known limits, or the limits themselves."""

    compute_capability: str | None = Field(default=None, max_length=16)  # "9.0"
    shared_memory_per_block: int | None = Field(default=None, ge=1, le=1 << 30)  # bytes, opt-in maximum
    threads_per_block: int | None = Field(default=None, ge=1, le=1 << 20)
    registers_per_block: int | None = Field(default=None, ge=1, le=1 << 30)
    registers_per_thread: int | None = Field(default=None, ge=1, le=1 << 16)


class Limits(StrictModel):
    compile_timeout_s: float = Field(default=300, gt=0, le=86_400)
    run_timeout_s: float = Field(default=600, gt=0, le=86_400)
    max_attempts: int = Field(default=3, ge=1, le=20)
    # Lower resource limits for this study's trials; each worker caps them at its own.
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)


class Screen(StrictModel):
    """The screening stage: every trial is measured this way first (service.scheduling.screening)."""

    hot_window_s: float = Field(default=0.2, gt=0, le=600)  # GPU hot window (runtime_ms)
    warmup_s: float = Field(default=0.02, ge=0, le=600)  # at most the full stage's; a GPU's floor after idle: 0.1
    target_s: float = Field(default=0.05, gt=0, le=3600)  # host-timed backends: time per sample set
    cold_samples: int = Field(default=50, ge=1, le=100_000)  # cold samples per shape (latency_ms, p99_ms)
    objectives: list[ShortText] | None = Field(default=None, max_length=16)  # default: see screening._screened


class Promote(StrictModel):
    """Which screened trials are measured fully (service.scheduling.screening)."""

    margins: dict[ShortText, Annotated[float, Field(ge=0, le=10)]] = Field(default_factory=dict, max_length=16)
    energy_runtime_ratio: float | None = Field(default=None, ge=1.0, le=1000)  # default: see screening


class StudyMeasure(MeasureSettings):
    """The full measurement's settings, and optionally a screening stage before it (a study
    without one stores neither key)."""

    screen: Screen | None = Field(default=None, exclude_if=lambda value: value is None)
    promote: Promote | None = Field(default=None, exclude_if=lambda value: value is None)


class StudyDocument(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    kernel: Kernel
    space: list[Parameter] | None = Field(default=None, max_length=MAX_PARAMETERS)
    baseline: dict[ShortText, Scalar] | None = Field(default=None, max_length=MAX_PARAMETERS)
    objectives: list[Objective | ShortText] = Field(min_length=1, max_length=8)
    constraints: list[Constraint] = Field(default_factory=list, max_length=32)
    sampler: Sampler = Field(default_factory=Sampler)
    budget: Budget = Field(default_factory=Budget)
    parallelism: int = Field(default=4, ge=1, le=MAX_PARALLELISM)
    pool: str = Field(default="default", min_length=1, max_length=100)
    # its place in the pool's lease order (service.trials.fairshare): the class first, then its
    # weight among its team's studies of the same class
    priority: Priority = Priority.NORMAL
    weight: float = Field(default=1.0, gt=0, le=1000)
    limits: Limits = Field(default_factory=Limits)
    measure: StudyMeasure = Field(default_factory=StudyMeasure)
    target: Target | None = None
    reference_point: dict[ShortText, float] | None = Field(default=None, max_length=8)  # ratios to the baseline
    # what the first trials after the baseline measure: "related": the best configurations of
    # related studies, nearest shape first (service.studies.transfer; the default for built-ins);
    # "catalog": the approved configurations of this kernel for the closest targets
    # (service.artifacts.catalog.warm_start_configs); "none"
    warm_start: WarmStartMode | None = None
    # whether other teams' studies may start from this study's trials (warm_start: related)
    share_trials: bool = False

    @field_validator("objectives", mode="after")
    @classmethod
    def _objectives(cls, value: list[Objective | str]) -> list[Objective | str]:
        return [Objective(name=o) if isinstance(o, str) else o for o in value]

    @field_validator("space", mode="after")
    @classmethod
    def _space(cls, value: list[Any] | None) -> list[Any] | None:
        return None if value is None else SearchSpace.validate_parameters(value)


class ResolvedObjective(Objective):
    direction: Direction  # the document's, else the metric's own


class ResolvedWarmStart(WarmStart):
    # the document's configurations and the named studies' fronts, each made whole
    configs: list[dict[str, Scalar]] = Field(default_factory=list)


class ResolvedSampler(Sampler):
    """The sampler `auto` chose (or the one named), with its options resolved."""

    ordered_choices: bool = False  # documents stored before it existed: categoricals as they are
    warm_start: ResolvedWarmStart | None = None


class ResolvedBudget(StrictModel):
    """The budget with its defaults filled; what documents stored before a cap existed lack
    reads as they were run."""

    max_trials: int
    max_failed_trials: int
    wall_time_s: float | None = None
    count_infeasible: bool = True
    max_infeasible: int | None = None
    max_infeasible_in_a_row: int | None = None


class ResolvedDocument(StrictModel):
    """The study document as stored (the `document` column) and as every reader gets it
    (`document_of`): validated, with what the document left out resolved: the built-in's
    space and workload, the baseline, each objective's direction, the sampler `auto` chose,
    the budget's caps, the measurement's energy windows and screening stage, the target's
    device limits, and whether the study only compiles."""

    name: str
    description: str = ""
    kernel: KernelSpec  # with `controls` naming the space's compiler controls parameters
    space: list[Parameter]
    baseline: dict[str, Scalar]
    objectives: list[ResolvedObjective]
    constraints: list[Constraint] = Field(default_factory=list)
    sampler: ResolvedSampler
    budget: ResolvedBudget
    parallelism: int
    pool: str
    priority: Priority = Priority.NORMAL
    weight: float = 1.0
    limits: Limits = Field(default_factory=Limits)
    measure: StudyMeasure = Field(default_factory=StudyMeasure)
    target: DeviceLimits | None = None
    reference_point: dict[str, float]  # per objective, a ratio to the baseline
    warm_start: WarmStartMode | None = None  # None: stored before `related` existed, read as "none"
    share_trials: bool = False
    compile_only: bool = False
    # warm_start: catalog or related: the configurations found, measured after the baseline
    warm_start_configs: list[dict[str, Scalar]] | None = Field(default=None, exclude_if=lambda value: value is None)
    # warm_start: related: where each of warm_start_configs came from
    warm_start_sources: list[WarmSource] | None = Field(default=None, exclude_if=lambda value: value is None)
    # warm_start: related with the `lfbo` sampler: the related studies it learns from
    warm_start_learned: list[LearnedFrom] | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_serializer("space")
    def _space_as_given(self, space: list[Parameter]) -> list[dict[str, Any]]:
        return SearchSpace(space).dump()

    @property
    def objective_names(self) -> list[str]:
        return [o.name for o in self.objectives]

    @property
    def warm_configs(self) -> list[dict[str, Any]]:
        """What trials 1, 2, ... measure after the baseline: the catalog's approved
        configurations (warm_start: catalog), then the earlier studies' fronts and the listed
        ones (sampler.warm_start)."""
        listed = self.sampler.warm_start.configs if self.sampler.warm_start is not None else []
        return [*(self.warm_start_configs or []), *listed]

    @property
    def requires_gpu(self) -> bool:
        """Whether the study's trials need a GPU: a GPU backend's, unless it only compiles."""
        return self.kernel.backend in GPU_BACKENDS and not self.compile_only


# as many studies as a listing shows and more: a listing reads every one of its studies (StudyOut)
_PARSED: LRUCache[tuple[int, datetime], ResolvedDocument] = LRUCache(maxsize=1024)
_PARSED_LOCK = threading.Lock()


def document_of(study: Study) -> ResolvedDocument:
    """The study's document, typed. A document never changes once its study is stored, so it
    is parsed once per process, the study known by its id and creation time (which no two
    studies share, whichever database they are in). Keys a document does not know are left
    aside (a document stored by another release)."""
    if study.id is None or study.created_at is None:  # not stored yet: nothing identifies it
        return ResolvedDocument.model_validate(study.document, extra="ignore")
    key = (study.id, study.created_at)
    with _PARSED_LOCK:
        parsed = _PARSED.get(key)
    if parsed is None:
        parsed = ResolvedDocument.model_validate(study.document, extra="ignore")
        with _PARSED_LOCK:
            _PARSED[key] = parsed
    return parsed


class DocumentError(ValueError):
    """A semantic error found after the schema check, with the field that holds it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def check_shape(raw: Any) -> None:
    """Refuse what no schema check should have to walk into: nesting deeper than MAX_DEPTH,
    NUL characters (which no database stores in text) and NaN or infinities (which JSON
    cannot carry, anywhere: free-form fields included), naming where they are."""
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DocumentError(path or "body", f"the document is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            if "\x00" in value:
                raise DocumentError(path or "body", "text must not contain NUL characters")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise DocumentError(path or "body", f"{value} is not a finite number; use a finite one")
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and "\x00" in key:
                    raise DocumentError(path or "body", "keys must not contain NUL characters")
                stack.append((item, f"{path}.{key}" if path else str(key), depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}.{i}" if path else str(i), depth + 1) for i, item in enumerate(value))


def resolve_objectives(doc: StudyDocument) -> list[ResolvedObjective]:
    """Objectives with their directions; unknown names are refused except for python
    kernels, whose function returns metrics of its own naming."""
    resolved: list[ResolvedObjective] = []
    seen: set[str] = set()
    for i, objective in enumerate(doc.objectives):
        assert isinstance(objective, Objective)
        name = objective.name
        if name in seen:
            raise DocumentError(f"objectives.{i}.name", f"objective {name!r} is listed twice")
        seen.add(name)
        problem = unknown_objective(name, doc.kernel.backend)
        if problem:
            raise DocumentError(f"objectives.{i}.name", problem)
        known = KNOWN_OBJECTIVES.get(name)
        direction = objective.direction or (known[0] if known else "minimize")
        resolved.append(ResolvedObjective(name=name, direction=direction))
    for i, constraint in enumerate(doc.constraints):
        problem = unknown_metric(constraint.metric, seen)
        if problem:
            raise DocumentError(f"constraints.{i}.metric", problem)
    return resolved


def unknown_objective(name: str, backend: Any) -> str | None:
    """Why `name` is no objective of a `backend` kernel, or None: python kernels may name
    metrics their function returns."""
    if name in KNOWN_OBJECTIVES or (backend == "python" and NAME_RE.match(name)):
        return None
    return (f"unknown objective {name!r}; use one of {', '.join(KNOWN_OBJECTIVES)}"
            " (python kernels may also name metrics their function returns)")


def unknown_metric(name: str, objectives: Collection[str]) -> str | None:
    """Why a constraint cannot name `name`, or None."""
    if name in KNOWN_OBJECTIVES or name in objectives:
        return None
    return f"unknown metric {name!r}; use an objective of this study or one of {', '.join(KNOWN_OBJECTIVES)}"


def resolve_baseline(space: SearchSpace, given: dict[str, Any] | None,
                     builtin_default: dict[str, Any]) -> dict[str, Any]:
    """The baseline configuration: the document's, else the built-in kernel's default, else
    each parameter's default. Every parameter must get a value inside its range."""
    baseline: dict[str, Any] = {}
    for key in given or {}:
        if key not in space.by_name:
            raise DocumentError(f"baseline.{key}", f"baseline names {key!r}, which is not a parameter of the space")
    for index, param in enumerate(space.parameters):
        if given and param.name in given:
            value, field = given[param.name], f"baseline.{param.name}"
        elif param.name in builtin_default:
            value, field = builtin_default[param.name], f"space.{index}"
        else:
            value, field = param_default(param), f"space.{index}.default"
            if value is None:
                raise DocumentError(
                    field,
                    f"parameter {param.name!r} has no default: give it a default or set baseline.{param.name}",
                )
        problem = value_problem(param, value)
        if problem:
            raise DocumentError(field, f"baseline value for {param.name!r}: {problem}")
        baseline[param.name] = value
    return baseline


def warm_config(space: SearchSpace, given: dict[str, Any], baseline: dict[str, Any], field: str) -> dict[str, Any]:
    """A warm-start configuration made whole with the baseline's values, or why it is not one."""
    for key, value in given.items():
        problem = space.value_problem(key, value)
        if problem:
            raise DocumentError(f"{field}.{key}", f"warm-start configuration: {problem}")
    return {name: given.get(name, baseline[name]) for name in space.names}


def check_grid(space: SearchSpace) -> int:
    """The grid's size, or why a grid sampler cannot walk this space."""
    size = space.grid_size()
    if size is None:
        raise DocumentError("sampler.name", "grid needs a step on every float parameter")
    if size > MAX_GRID_POINTS:
        raise DocumentError(
            "sampler.name",
            f"the grid has {size:.3g} points, over the limit of {MAX_GRID_POINTS:,}; "
            "use nsga2, tpe or random, or give fewer values",
        )
    return size


def reference_point(doc: StudyDocument, objectives: list[ResolvedObjective]) -> dict[str, float]:
    given = doc.reference_point or {}
    names = [o.name for o in objectives]
    for key, value in given.items():
        if key not in names:
            raise DocumentError(f"reference_point.{key}", f"{key!r} is not an objective of this study")
        if value <= 1.0:
            raise DocumentError(
                f"reference_point.{key}", "a reference point is a ratio to the baseline and must be > 1"
            )
    return {name: float(given.get(name, 2.0)) for name in names}
