"""The wire contract between the control plane and worker agents.

Both sides import this module; it imports nothing from either. Everything that crosses
the network between a worker and the service is one of these models, serialised as JSON.
"""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

# 2: a worker may report failure reason `infeasible` and its GPU's `device_limits`, which a
# version-1 control plane would refuse; it serves version-1 workers unchanged
# 3: a kernel may name compiler controls parameters and a trial carry the files they name,
# and a trial may be compile-only; the fields are left out of what a study without them sends
# 4: one lease queue over kinds of work: a lease names its `kind` and carries that kind's
# payload in `work` (contract 3 and older get `trial` or `validation` instead), a worker
# registers the kinds it runs, and every kind's report goes to /v1/leases/{token}/result
CONTRACT_VERSION = 4
CONTRACT_HEADER = "X-Paretune-Contract"  # every worker request names its CONTRACT_VERSION
# the kinds of leased work a worker of contract 3 or older runs (and a newer one by default)
DEFAULT_KINDS = ("trial", "validation")
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,9}$"  # a kind's name: short, it starts every lease token


class FailureReason(StrEnum):
    """Why a trial failed; the worker chooses one, the service stores it verbatim."""

    COMPILE_ERROR = "compile_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASH = "crash"
    UNSUPPORTED = "unsupported"  # the worker cannot run this kernel (missing tool, capability)
    # the configuration cannot launch on the device (shared memory, registers or threads per
    # block over its limits): set by a worker before compiling or from the compiled kernel,
    # or by the service, which refuses it before queuing where it knows the limits
    INFEASIBLE = "infeasible"
    ERROR = "error"  # anything else raised by the backend or the user's objective
    LEASE_EXPIRED = "lease expired"  # set by the service only
    CANCELLED = "cancelled"  # set by the service only


SERVICE_ONLY_REASONS = frozenset({FailureReason.LEASE_EXPIRED, FailureReason.CANCELLED})


class IsolationLevel(StrEnum):
    """How a worker keeps a trial away from its secrets and the host (docs/security.md),
    weakest first."""

    NONE = "none"  # same user as the agent: rlimits and a scrubbed environment only
    USER = "user"  # an unprivileged uid of its own, private job directory
    NAMESPACES = "namespaces"  # and own mount, PID, IPC, UTS and network namespaces

    @property
    def rank(self) -> int:
        return list(IsolationLevel).index(self)


class DeviceLimits(BaseModel):
    """What one thread block may use on a GPU: a configuration over any of them cannot
    launch (wire.kernels.resources). `shared_memory_per_block` is the opt-in maximum
    (static plus dynamic), the figure Triton and the CUDA driver check against."""

    model_config = ConfigDict(extra="forbid")

    compute_capability: str | None = Field(default=None, max_length=16)  # "9.0"
    shared_memory_per_block: int = Field(ge=1, le=1 << 30)  # bytes
    threads_per_block: int = Field(default=1024, ge=1, le=1 << 20)
    registers_per_block: int = Field(default=65536, ge=1, le=1 << 30)  # 32-bit registers
    registers_per_thread: int = Field(default=255, ge=1, le=1 << 16)


class Fingerprint(BaseModel):
    """Hardware and software a worker measures on; stored with every trial it runs."""

    model_config = ConfigDict(extra="allow")

    hostname: str = ""
    os: str = ""
    python: str = ""
    cpu_model: str = ""
    cpu_count: int = 0
    gpu_name: str | None = None
    gpu_count: int = 0
    driver_version: str | None = None
    cuda_version: str | None = None
    compilers: dict[str, str] = Field(default_factory=dict)  # e.g. {"cc": "gcc 12.2", "ptxas": "13.0"}
    backends: list[str] = Field(default_factory=list)  # backends this worker can run
    energy: bool = False  # whether an energy counter (RAPL or NVML) is readable
    paretune: str = ""
    isolation: IsolationLevel = IsolationLevel.NONE  # how its trials are isolated
    device_limits: DeviceLimits | None = None  # of its GPU: the service refuses what cannot launch there


WorkKindName = Annotated[str, Field(pattern=KIND_PATTERN)]


class RegisterRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    pool: str = Field(default="default", min_length=1, max_length=100)
    fingerprint: Fingerprint
    # the kinds of leased work this worker runs: it is leased those only
    kinds: list[WorkKindName] = Field(default_factory=lambda: list(DEFAULT_KINDS), min_length=1, max_length=16)


class RegisterResponse(BaseModel):
    worker_id: int
    heartbeat_s: float  # how often to heartbeat a held lease
    lease_s: float  # how long a lease lives without a heartbeat


class WorkloadShape(BaseModel):
    """One shape of the workload, with its weight in the traffic mix."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    dims: dict[Annotated[str, Field(max_length=100)], Annotated[int, Field(ge=0, le=2**40)]] = Field(max_length=32)
    weight: float = Field(default=1.0, gt=0, le=1e12)


class ControlsParameter(BaseModel):
    """A parameter of the space whose value names an NVIDIA Advanced Controls File (the
    sha256 of its bytes) or "none": which compiler applies it and the release it is for."""

    model_config = ConfigDict(extra="forbid")

    compiler: Literal["ptxas", "nvcc"]
    version: str = Field(max_length=16)  # the compiler release: "13.3"


NO_CONTROLS = "none"  # a controls parameter's value that applies no file


class ControlsFile(BaseModel):
    """The bytes of an Advanced Controls File a configuration names, by their sha256."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    content_base64: str = Field(max_length=1 << 20)


class KernelSpec(BaseModel):
    """What to compile and run. Either a built-in kernel name or user source."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    builtin: str | None = None
    source: str | None = None  # C/CUDA/Triton/PTX source text, or "module:function" for python
    entry: str | None = None  # function/kernel symbol in the source
    workload: list[WorkloadShape] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)  # backend-specific settings
    # configuration keys that name compiler controls files (not kernel parameters)
    controls: dict[str, ControlsParameter] = Field(default_factory=dict, exclude_if=lambda value: not value)


class MeasureSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    warmup_s: float = Field(default=0.05, ge=0, le=600)
    min_repeats: int = Field(default=20, ge=1, le=1_000_000)
    max_repeats: int = Field(default=2000, ge=1, le=1_000_000)
    target_s: float = Field(default=0.3, gt=0, le=3600)  # time budget per measurement
    hot_window_s: float = Field(default=1.0, gt=0, le=600)  # GPU hot window (energy, runtime_ms)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    # at most this many cold samples per shape (a screening stage takes few), whatever else asks for more
    cold_samples: int | None = Field(default=None, ge=1, le=1_000_000)


Stage = Literal["screen", "full"]


class SandboxLimits(BaseModel):
    """Resource limits of a trial's sandbox processes. A study may lower the worker's caps
    (limits.sandbox in the study document); a worker applies min(study, its cap)."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int | None = Field(default=None, ge=64, le=16 << 20)  # address space (data for GPU backends)
    processes: int | None = Field(default=None, ge=8, le=1 << 20)  # processes and threads of the sandbox user
    file_size_mb: int | None = Field(default=None, ge=1, le=16 << 20)  # largest file it may write
    open_files: int | None = Field(default=None, ge=32, le=1 << 20)
    cpu_s: int | None = Field(default=None, ge=1, le=7 * 86_400)  # CPU time of one phase
    disk_mb: int | None = Field(default=None, ge=1, le=16 << 20)  # size of its job directory


class TrialSpec(BaseModel):
    """One unit of work: a configuration of a kernel to compile, check and measure."""

    trial_id: int
    study_id: int
    number: int
    attempt: int
    is_baseline: bool
    kernel: KernelSpec
    config: dict[str, Any]
    objectives: list[str]
    compile_timeout_s: float
    run_timeout_s: float
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    # a study that screens: "screen" (objectives and measure are the screen's) or "full"
    stage: Stage | None = None
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)  # the study's own lower limits
    # every objective is a compile metric (COMPILE_METRICS): compiled, never run; no GPU needed
    compile_only: bool = Field(default=False, exclude_if=lambda value: not value)
    acfs: list[ControlsFile] = Field(default_factory=list, exclude_if=lambda value: not value)  # files it names


class ValidationCandidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate_id: int
    config: dict[str, Any]


class ValidationSpec(BaseModel):
    """One validation job: the baseline and candidates of a study re-measured in interleaved
    rounds on one worker, after a correctness check on extended shapes. A validation split
    over several workers is several jobs (job_id), each a block of rounds."""

    model_config = ConfigDict(extra="forbid")

    validation_id: int
    job_id: int
    study_id: int
    attempt: int = 1
    kernel: KernelSpec
    baseline: dict[str, Any]
    candidates: list[ValidationCandidate] = Field(min_length=1)
    objectives: list[str] = Field(min_length=1)
    rounds: int = Field(ge=2, le=1000)
    measure: MeasureSettings = Field(default_factory=MeasureSettings)
    # shapes of the correctness check; empty: the worker derives them from the workload
    # (workers.validation.shapes.extended_shapes)
    shapes: list[WorkloadShape] = Field(default_factory=list)
    compile_timeout_s: float = Field(gt=0)  # for each configuration
    run_timeout_s: float = Field(gt=0)  # the whole run: every check and every round
    compile_only: bool = Field(default=False, exclude_if=lambda value: not value)  # as TrialSpec's
    acfs: list[ControlsFile] = Field(default_factory=list, exclude_if=lambda value: not value)

    @model_validator(mode="after")
    def _distinct_candidates(self) -> ValidationSpec:
        ids = [c.candidate_id for c in self.candidates]
        if len(set(ids)) != len(ids):
            raise ValueError(f"candidate ids must be distinct, got {ids}")
        return self


def _left_out_when_none(value: object) -> bool:
    return value is None


class Lease(BaseModel):
    """A leased unit of work: its `kind` (trial, validation, ...) and that kind's payload
    (`work`: a TrialSpec, a ValidationSpec, as the kind's worker Job reads it). Workers of
    contract 3 and older are sent the payload as `trial` or `validation` instead, the fields
    they know (service.workers.compat)."""

    token: str
    expires_at: datetime
    lease_s: float
    heartbeat_s: float
    kind: str | None = Field(default=None, exclude_if=_left_out_when_none)
    work: dict[str, Any] | SerializeAsAny[BaseModel] | None = Field(default=None, exclude_if=_left_out_when_none)
    trial: TrialSpec | None = Field(default=None, exclude_if=_left_out_when_none)  # contract 3 and older
    validation: ValidationSpec | None = Field(default=None, exclude_if=_left_out_when_none)  # contract 3 and older

    @model_validator(mode="after")
    def _one_unit_of_work(self) -> Lease:
        forms = [self.kind is not None and self.work is not None, self.trial is not None, self.validation is not None]
        if sum(forms) != 1 or (self.kind is None) != (self.work is None):
            raise ValueError("a lease holds one unit of work: a kind and its work (before contract 4: exactly "
                             "one of trial and validation)")
        return self


class LeaseRequest(BaseModel):
    worker_id: int
    wait_s: float = Field(default=20.0, ge=0, le=60)


class RoundProgress(BaseModel):
    """How far a unit of work measured in rounds (a validation job) has come: the seconds
    each round finished so far took, in order. The service shows rounds done and left and
    an ETA from them."""

    model_config = ConfigDict(extra="forbid")

    round_s: list[float] = Field(default_factory=list, max_length=1000)

    @field_validator("round_s")
    @classmethod
    def _durations(cls, round_s: list[float]) -> list[float]:
        for index, seconds in enumerate(round_s):
            if _finite(seconds, f"round_s.{index}") < 0:
                raise ValueError(f"round_s.{index}: a round cannot take negative time ({seconds})")
        return round_s


class HeartbeatRequest(BaseModel):
    phase: str | None = None  # compile, check, measure: shown to people watching
    # a validation job's rounds so far (a service that predates it ignores the field)
    progress: RoundProgress | None = Field(default=None, exclude_if=_left_out_when_none)


class HeartbeatResponse(BaseModel):
    expires_at: datetime
    cancel: bool = False  # the study was cancelled: stop the trial and post nothing


# What the compiler reports of a build, measured without running it (name -> (unit,
# meaning)): the objectives of a compile-only study, which needs no GPU.
COMPILE_METRICS: dict[str, tuple[str, str]] = {
    "registers": ("regs", "registers per thread (the most of any shape)"),
    "spill_bytes": ("B", "spill stores plus spill loads per thread"),
    "spill_store_bytes": ("B", "spill stores per thread"),
    "spill_load_bytes": ("B", "spill loads per thread"),
    "stack_frame_bytes": ("B", "stack frame per thread"),
    "smem_bytes": ("B", "static shared memory per block"),
    "sass_bytes": ("B", "machine code (the cubin's .text sections)"),
    "compile_s": ("s", "compile time of the configuration"),
}


def compile_only(metrics: list[str]) -> bool:
    """Whether a study of these objectives and constraint metrics compiles and never runs."""
    return bool(metrics) and all(name in COMPILE_METRICS for name in metrics)


# Metrics that are amounts (time, energy, power, bytes, registers): never negative.
NON_NEGATIVE_METRICS = frozenset({"runtime_ms", "latency_ms", "p99_ms", "energy_mj", "power_w", *COMPILE_METRICS})
NON_NEGATIVE_UNITS = frozenset({"ns", "us", "ms", "s", "mJ", "J", "W", "B", "regs"})


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value}")
    return value


def worker_reason(reason: FailureReason | None) -> FailureReason | None:
    """A failure reason a worker may report (not one the service sets)."""
    if reason in SERVICE_ONLY_REASONS:
        allowed = ", ".join(r.value for r in FailureReason if r not in SERVICE_ONLY_REASONS)
        raise ValueError(f"{reason.value!r} is set by the service only; a worker reports one of {allowed}")
    return reason


def durations(timings: dict[str, float]) -> dict[str, float]:
    for name, value in timings.items():
        if _finite(value, f"timing {name!r}") < 0:
            raise ValueError(f"timing {name!r} is a duration and cannot be negative ({value})")
    return timings


def is_amount(name: str, unit: str) -> bool:
    """Whether a metric is a time, an energy or a power (never negative)."""
    return name in NON_NEGATIVE_METRICS or unit in NON_NEGATIVE_UNITS


class Metric(BaseModel):
    """A measured objective with its sample statistics."""

    value: float
    unit: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = Field(default=1, ge=0)
    stats: dict[str, float] = Field(default_factory=dict)  # median, mean, std, p99, min, max

    @field_validator("value", "ci_low", "ci_high")
    @classmethod
    def _finite_value(cls, value: float | None) -> float | None:
        return None if value is None else _finite(value, "the value")

    @field_validator("stats")
    @classmethod
    def _finite_stats(cls, stats: dict[str, float]) -> dict[str, float]:
        for name, value in stats.items():
            _finite(value, f"statistic {name!r}")
        return stats

    def negative_part(self) -> str | None:
        """The first of value, interval and statistics that is below zero, if any."""
        for name, value in [("value", self.value), ("ci_low", self.ci_low), ("ci_high", self.ci_high),
                            *((f"stats.{k}", v) for k, v in self.stats.items())]:
            if value is not None and value < 0:
                return f"{name} is {value}"
        return None


class WorkReport(BaseModel):
    """What every kind of work reports for its lease (the kind's own report adds to it);
    posting the same report twice counts once."""

    status: Literal["completed", "failed"]
    failure_reason: FailureReason | None = None
    message: str = ""
    timings: dict[str, float] = Field(default_factory=dict)  # compile_s, check_s, measure_s
    log: str = Field(default="", max_length=200_000)
    # hand this worker its next lease with the acknowledgement, if one is queued now (a
    # service that predates it ignores the field: the worker then long-polls as before)
    next_lease: bool = False

    _worker_reason = field_validator("failure_reason")(lambda cls, reason: worker_reason(reason))
    _durations = field_validator("timings")(lambda cls, timings: durations(timings))


class WorkAck(BaseModel):
    """The service's answer to a report: the unit's state now, whether the report had been
    received before, and with WorkReport.next_lease the worker's next lease, if any."""

    state: str
    duplicate: bool = False
    next_lease: Lease | None = None


class TrialResult(WorkReport):
    """What a worker reports for a trial's lease."""

    metrics: dict[str, Metric] = Field(default_factory=dict)
    correctness: dict[str, Any] = Field(default_factory=dict)
    compile_report: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)  # clocks, temperature, throttling

    @field_validator("metrics")
    @classmethod
    def _amounts_not_negative(cls, metrics: dict[str, Metric]) -> dict[str, Metric]:
        for name, metric in metrics.items():
            if is_amount(name, metric.unit):
                problem = metric.negative_part()
                if problem:
                    raise ValueError(f"{name!r} is a time, energy or power and cannot be negative: {problem}")
        return metrics


class ResultAck(WorkAck):
    trial_id: int


class Target(BaseModel):
    """Where a configuration is measured or applied: the device and the toolchain.

    GPU backends fill gpu and compute_capability, the cpu backend cpu and machine. Every
    field is the string workers.runtime.detect reports, so that a worker's target and the
    one a build or a runtime sees compare equal when they are the same.
    """

    model_config = ConfigDict(extra="forbid")

    gpu: str | None = None  # "NVIDIA H200"
    compute_capability: str | None = None  # "9.0"
    cpu: str | None = None  # cpu backend: the CPU model
    machine: str | None = None  # cpu backend: "x86_64", "aarch64"
    driver: str | None = None  # NVIDIA driver, "570.133.20"
    cuda: str | None = None  # CUDA version the driver supports, "12.8"
    triton: str | None = None
    ptxas: str | None = None  # the ptxas the kernel is compiled with, "13.0"
    nvrtc: str | None = None
    cc: str | None = None  # cpu backend: the host C compiler, "gcc (Debian 12.2.0-14) 12.2.0"

    TOOLCHAIN_FIELDS: ClassVar[tuple[str, ...]] = ("driver", "cuda", "triton", "ptxas", "nvrtc", "cc")

    def device(self) -> dict[str, str | None]:
        """The fields that must match for a configuration to apply at all (a compile-only
        build's: the compute capability it was built for)."""
        if self.gpu is not None:
            return {"gpu": self.gpu, "compute_capability": self.compute_capability}
        if self.cpu is None and self.compute_capability is not None:
            return {"compute_capability": self.compute_capability}
        return {"cpu": self.cpu, "machine": self.machine}

    def toolchain(self) -> dict[str, str]:
        """The versions recorded (a missing one is unknown, not compared)."""
        values = {name: getattr(self, name) for name in self.TOOLCHAIN_FIELDS}
        return {name: value for name, value in values.items() if value is not None}


class ShapeCorrectness(BaseModel):
    """Correctness of one configuration on one shape."""

    dims: dict[str, int]
    passed: bool
    errors: dict[str, float] = Field(default_factory=dict)  # rel_err or rel_l2_err, max_abs_err, ...
    tolerance: float | None = None


class ConfigOutcome(BaseModel):
    """One configuration of a validation job: its correctness on every shape, and the value
    of each objective in each round (index = round)."""

    candidate_id: int | None  # None: the baseline
    status: Literal["ok", "failed"]  # ok: compiled, correct and measured in every round
    failure_reason: FailureReason | None = None
    message: str = ""
    correct: bool | None = None  # None: not checked (it did not compile)
    correctness: list[ShapeCorrectness] = Field(default_factory=list)
    values: dict[str, list[float]] = Field(default_factory=dict)
    units: dict[str, str] = Field(default_factory=dict)
    environments: list[dict[str, Any]] = Field(default_factory=list)  # of each round's measurement
    compile_report: dict[str, Any] = Field(default_factory=dict)

    _worker_reason = field_validator("failure_reason")(lambda cls, reason: worker_reason(reason))

    @model_validator(mode="after")
    def _measured(self) -> ConfigOutcome:
        for name, values in self.values.items():
            for index, value in enumerate(values):
                if _finite(value, f"values.{name}.{index}") < 0 and is_amount(name, self.units.get(name, "")):
                    raise ValueError(f"values.{name}.{index}: a time, energy or power cannot be negative ({value})")
        return self


class ValidationReport(WorkReport):
    """What a worker reports for a validation lease. `failed` when no comparison could be
    made (the baseline failed, the run crashed or timed out); a candidate that fails is
    reported in its own outcome."""

    baseline: ConfigOutcome
    candidates: list[ConfigOutcome] = Field(default_factory=list)
    rounds: int = 0  # rounds measured
    order: list[list[int | None]] = Field(default_factory=list)  # each round's order (candidate ids, None: baseline)
    shapes: list[WorkloadShape] = Field(default_factory=list)  # the shapes correctness was checked on
    target: Target | None = None  # the device and toolchain measured on
    fingerprint: Fingerprint | None = None
    environment: dict[str, Any] = Field(default_factory=dict)


class ValidationAck(WorkAck):
    validation_id: int
    job_id: int
