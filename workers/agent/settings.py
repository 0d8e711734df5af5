"""The worker agent's settings: one model, read from the environment (PARETUNE_WORKER_*),
overridden by the `worker` command's options, handed as JSON to an agent started as a
process of its own.

Lists are written as they are on the command line (comma-separated backends and kinds, CPU
lists such as 0-3,8, paths separated by os.pathsep) or as JSON; the sandbox caps as JSON
(PARETUNE_WORKER_LIMITS='{"memory_mb": 4096}') or one at a time
(PARETUNE_WORKER_LIMITS__MEMORY_MB=4096). The token is never written anywhere by the agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from wire.contract import KIND_PATTERN, SandboxLimits

ENV_PREFIX = "PARETUNE_WORKER_"
SETTINGS_ON_STDIN = "--settings-stdin"  # `python -m workers` reads its AgentSettings as JSON on stdin first


def parse_cpus(value: str) -> list[int]:
    """A CPU list as taskset and cgroups write it: "0-3,8,10-11"."""
    cpus: list[int] = []
    for part in value.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise ValueError(f"{value!r} is not a CPU list such as 0-3,8") from None
        if last < first:
            raise ValueError(f"{part!r}: the range runs backwards")
        cpus += [c for c in range(first, last + 1) if c not in cpus]
    return cpus


def _listed(value: Any, separator: str) -> Any:
    """A list as the environment writes it: JSON, or parts separated by `separator`."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        return json.loads(value)
    return [part.strip() for part in value.split(separator) if part.strip()] or None


class AgentSettings(BaseSettings):
    """Everything a worker agent is told. Each field is PARETUNE_WORKER_<NAME> in the
    environment (server and toolchain also PARETUNE_SERVER and PARETUNE_TOOLCHAIN)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid",
                                      validate_by_name=True)

    server: str = Field(default="http://127.0.0.1:8000",
                        validation_alias=AliasChoices(f"{ENV_PREFIX}SERVER", "PARETUNE_SERVER"))
    token: str = Field(default="", repr=False)
    pool: str = "default"
    name: str | None = None  # default: host-pid
    kinds: Annotated[list[Annotated[str, Field(pattern=KIND_PATTERN)]] | None, NoDecode] = None  # None: all it can
    cache_dir: Path | None = None  # default: ~/.cache/paretune
    cache_max_bytes: int = Field(default=2 << 30, ge=0)
    prefetch: bool = True  # lease and compile the next trial while this one measures
    lease_ahead: int = Field(default=1, ge=1, le=8)  # with prefetch: held (and compiled) beyond the one measuring
    compilers: int = Field(default=1, ge=1, le=8)  # with prefetch: compiled at once (at most lease_ahead)
    max_trials: int | None = Field(default=None, ge=1)  # exit after this many leases
    backends: Annotated[list[str] | None, NoDecode] = None  # None: every backend whose probe says available
    wait_s: float = Field(default=10.0, ge=0, le=60)  # lease long-poll
    drain_timeout_s: float = Field(default=30.0, ge=0)
    measure_cpus: Annotated[list[int] | None, NoDecode] = None  # default: the last usable CPU
    compile_cpus: Annotated[list[int] | None, NoDecode] = None  # default: the other usable CPUs
    warm_runner: bool | None = None  # None: as each backend prefers (triton, cuda: warm)
    gpu: int | None = Field(default=None, ge=0)  # the one GPU its sandboxes see (CUDA_VISIBLE_DEVICES)
    runner_start_timeout_s: float = Field(default=180.0, gt=0)
    # idle warm runners of other studies kept per phase and backend (each holds an interpreter,
    # and for GPU backends a CUDA context); at levels without namespaces none is kept
    idle_runners: int = Field(default=3, ge=0, le=16)
    isolation: str = Field(default="auto", pattern="^(auto|namespaces|user|none)$")
    sandbox_uid: int | None = Field(default=None, ge=1)  # root agents: trials run as this uid (compile: +1)
    bwrap: str | None = None  # the bubblewrap binary (default: bwrap on PATH)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)  # the operator's caps (unset: DEFAULTS)
    python_paths: Annotated[list[Path], NoDecode] = Field(default_factory=list)  # objective modules trials import
    work_dir: Path | None = None  # job directories (default: a fresh temporary directory)
    private_paths: Annotated[list[Path], NoDecode] = Field(default_factory=list)  # made unreadable to other users
    own_process: bool = False  # the agent is its process (`paretune worker`): it may take it over
    toolchain: str | None = Field(default=None, validation_alias=AliasChoices(
        f"{ENV_PREFIX}TOOLCHAIN", "PARETUNE_TOOLCHAIN"))  # workers.compilers.toolchains.find

    _names = field_validator("kinds", "backends", mode="before")(lambda cls, value: _listed(value, ","))
    _paths = field_validator("python_paths", "private_paths", mode="before")(
        lambda cls, value: _listed(value, os.pathsep) or [])

    @field_validator("measure_cpus", "compile_cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.lstrip().startswith("["):
            return parse_cpus(value) if value.strip() else None
        return _listed(value, ",")

    def launch_json(self) -> str:
        """What an agent started as a process of its own reads on its stdin (the token
        included: it never goes on a command line or in an environment)."""
        return self.model_dump_json()
