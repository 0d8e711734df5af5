"""The wire contract between the control plane and worker agents.

Both sides import this module; it imports nothing from either. Everything that crosses
the network between a worker and the service is one of these models, serialised as JSON.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

CONTRACT_VERSION = 1


class FailureReason(StrEnum):
    """Why a trial failed; the worker chooses one, the service stores it verbatim."""

    COMPILE_ERROR = "compile_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASH = "crash"
    UNSUPPORTED = "unsupported"  # the worker cannot run this kernel (missing tool, capability)
    ERROR = "error"  # anything else raised by the backend or the user's objective
    LEASE_EXPIRED = "lease expired"  # set by the service only
    CANCELLED = "cancelled"  # set by the service only


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


class RegisterRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    pool: str = Field(default="default", min_length=1, max_length=100)
    fingerprint: Fingerprint


class RegisterResponse(BaseModel):
    worker_id: int
    heartbeat_s: float  # how often to heartbeat a held lease
    lease_s: float  # how long a lease lives without a heartbeat


class WorkloadShape(BaseModel):
    """One shape of the workload, with its weight in the traffic mix."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    dims: dict[Annotated[str, Field(max_length=100)], Annotated[int, Field(ge=0, le=2**40)]] = Field(max_length=32)
    weight: float = Field(default=1.0, gt=0, le=1e12)


class KernelSpec(BaseModel):
    """What to compile and run. Either a built-in kernel name or user source."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    builtin: str | None = None
    source: str | None = None  # C/CUDA/Triton source text, or "module:function" for python
    entry: str | None = None  # function/kernel symbol in the source
    workload: list[WorkloadShape] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)  # backend-specific settings


class MeasureSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    warmup_s: float = Field(default=0.05, ge=0, le=600)
    min_repeats: int = Field(default=20, ge=1, le=1_000_000)
    max_repeats: int = Field(default=2000, ge=1, le=1_000_000)
    target_s: float = Field(default=0.3, gt=0, le=3600)  # time budget per measurement
    hot_window_s: float = Field(default=1.0, gt=0, le=600)  # GPU hot window (energy, runtime_ms)
    confidence: float = Field(default=0.95, gt=0, lt=1)


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


class Lease(BaseModel):
    token: str
    expires_at: datetime
    lease_s: float
    heartbeat_s: float
    trial: TrialSpec


class LeaseRequest(BaseModel):
    worker_id: int
    wait_s: float = Field(default=20.0, ge=0, le=60)


class HeartbeatRequest(BaseModel):
    phase: str | None = None  # compile, check, measure: shown to people watching


class HeartbeatResponse(BaseModel):
    expires_at: datetime
    cancel: bool = False  # the study was cancelled: stop the trial and post nothing


class Metric(BaseModel):
    """A measured objective with its sample statistics."""

    value: float
    unit: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 1
    stats: dict[str, float] = Field(default_factory=dict)  # median, mean, std, p99, min, max


class TrialResult(BaseModel):
    """What a worker reports for a lease; posting the same result twice counts once."""

    status: str = Field(pattern="^(completed|failed)$")
    failure_reason: FailureReason | None = None
    message: str = ""
    metrics: dict[str, Metric] = Field(default_factory=dict)
    correctness: dict[str, Any] = Field(default_factory=dict)
    compile_report: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)  # clocks, temperature, throttling
    timings: dict[str, float] = Field(default_factory=dict)  # compile_s, check_s, measure_s
    log: str = Field(default="", max_length=200_000)


class ResultAck(BaseModel):
    trial_id: int
    state: str
    duplicate: bool = False
