"""A job directory: where one sandbox process of a phase works, as the agent sees it
(`outside`) and as its sandbox does (`inside`: /tmp at the namespaces level).

In the run phase the trial's build (a verified copy from the artifact cache) lies in the
job directory as `build`, read-only to the sandbox except its Triton cache (TRITON_CACHE_DIR,
per job), which stays writable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BUILD = "build"  # the trial's build inside its job directory
TOOL_CACHE = "triton-cache"  # TRITON_CACHE_DIR inside the build: per job, never shared


@dataclass(frozen=True)
class Job:
    """A job directory: `outside` as the agent sees it, `inside` as its sandbox does."""

    outside: Path
    inside: str

    @property
    def build(self) -> Path:
        return self.outside / BUILD

    @property
    def build_inside(self) -> str:
        return f"{self.inside}/{BUILD}"

    def env(self) -> dict[str, str]:
        """What a job sets in its process's environment (a warm runner sets it per job)."""
        return {"TRITON_CACHE_DIR": f"{self.build_inside}/{TOOL_CACHE}"}


def use_build(directory: Path) -> None:
    """Inside a sandbox that runs several builds (a validation job): Triton's cache is that
    of the build about to run (TRITON_CACHE_DIR is read when a kernel is looked up)."""
    os.environ["TRITON_CACHE_DIR"] = str(directory / TOOL_CACHE)
