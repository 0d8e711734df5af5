"""ArtifactStore: approved configurations for the kernels of a program, without the service
or the network at run time.

    store = ArtifactStore.load("artifacts/", public_keys="paretune-public.pem")
    configs = store.triton_configs("gemm_bf16", default=[triton.Config({...}, num_warps=4)])
    flags = store.flags("rmsnorm", "nvcc", default=["-O3"])

Loading verifies every artifact (sha256 and signature). Asking for a kernel picks the
artifact whose target matches this machine (wire.targets); when none does, the
kernel's default is returned with one warning per kernel (ArtifactFallbackWarning), and a
nearest match on another toolchain comes with one warning too (ArtifactToolchainWarning).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from wire.artifact import ArtifactDocument, Controls, TrustedKeys
from wire.contract import Target
from wire.targets import Match, select
from workers.runtime.apply import flags_for, triton_config, triton_config_arguments, triton_launch_options
from workers.runtime.bundle import LoadedArtifact, read_artifacts
from workers.runtime.detect import detect_target

T = TypeVar("T")


class ArtifactFallbackWarning(UserWarning):
    """No artifact matches this machine: the kernel runs with its default configuration."""


class ArtifactToolchainWarning(UserWarning):
    """The artifact applied was validated with other toolchain versions than these."""


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(kind: str, kernel: str, message: str, category: type[Warning]) -> None:
    with _warned_lock:
        if (kind, kernel) in _warned:
            return
        _warned.add((kind, kernel))
    warnings.warn(message, category, stacklevel=4)


@dataclass(frozen=True)
class Selection:
    """The artifact chosen for one kernel (match None: none applies here)."""

    kernel: str
    target: Target
    match: Match | None

    @property
    def document(self) -> ArtifactDocument | None:
        return self.match.document if self.match else None

    @property
    def controls(self) -> Controls | None:
        return self.match.document.controls if self.match else None


class ArtifactStore:
    def __init__(self, artifacts: Iterable[LoadedArtifact], *, target: Target | dict[str, Any] | None = None) -> None:
        self.artifacts = list(artifacts)
        self._override = target.model_dump(exclude_none=True) if isinstance(target, Target) else dict(target or {})

    @classmethod
    def load(
        cls,
        source: str | Path | Iterable[str | Path],
        public_keys: TrustedKeys | None = None,
        *,
        target: Target | dict[str, Any] | None = None,
    ) -> ArtifactStore:
        """Artifacts from files, directories or bundles, each verified against `public_keys`
        (None: the key a bundle embeds, integrity only). `target` overrides fields of the
        detected target, e.g. {"gpu": "NVIDIA H200", "compute_capability": "9.0"} for a
        build on a machine without that GPU."""
        return cls(read_artifacts(source, public_keys), target=target)

    def target_for(self, backend: str) -> Target:
        return Target(**{**detect_target(backend).model_dump(), **self._override})

    def select(self, kernel: str) -> Selection:
        """The artifact for `kernel` on this machine (warns once if none or a near one)."""
        documents = [a.document for a in self.artifacts if a.document.kernel.name == kernel]
        backend = documents[0].kernel.backend if documents else "cpu"
        here = self.target_for(backend)
        match = select(documents, kernel, here, backend=backend)
        if match is None:
            seen = ", ".join(sorted({_device(d.target) for d in documents})) or "none"
            _warn_once(
                "fallback",
                kernel,
                f"no approved configuration of {kernel!r} for {_device(here)} (artifacts for: {seen}); "
                "using the kernel's default configuration",
                ArtifactFallbackWarning,
            )
        elif not match.exact:
            _warn_once("toolchain", kernel, f"applying {match.describe()}", ArtifactToolchainWarning)
        return Selection(kernel, here, match)

    def config(self, kernel: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
        """The approved configuration as tuned (every key), or `default`."""
        controls = self.select(kernel).controls
        return dict(controls.config) if controls else dict(default or {})

    def triton_configs(self, kernel: str, default: list[T]) -> list[Any] | list[T]:
        """[triton.Config] of the approved configuration, or `default` (with one warning)."""
        controls = self.select(kernel).controls
        return [triton_config(controls)] if controls else default

    def triton_config_arguments(self, kernel: str) -> dict[str, Any] | None:
        """triton.Config's keyword arguments (no triton needed), None when nothing matches."""
        controls = self.select(kernel).controls
        return triton_config_arguments(controls) if controls else None

    def launch_options(self, kernel: str, acf_dir: Path | None = None) -> dict[str, Any]:
        """Compile options to pass at launch that triton.Config cannot carry (may be empty)."""
        controls = self.select(kernel).controls
        return triton_launch_options(controls, acf_dir) if controls else {}

    def autotune(self, kernel: str, key: list[str], default: list[Any], **options: Any) -> Callable[[T], T]:
        """`@store.autotune(name, key=[...], default=[...])` above `@triton.jit`:
        triton.autotune over the approved configuration, or over `default`."""
        import triton

        return triton.autotune(configs=self.triton_configs(kernel, default), key=key, **options)

    def flags(
        self, kernel: str, tool: str = "nvcc", default: list[str] | None = None, acf_dir: Path | None = None,
        compiler_version: str | None = None,
    ) -> list[str]:
        """The approved flags for `tool` (nvcc, nvrtc, ptxas, cc), or `default`. A carried ACF
        needs `compiler_version`, the exact version of the compiler that applies it."""
        controls = self.select(kernel).controls
        return flags_for(controls, tool, acf_dir, compiler_version) if controls else list(default or [])


def _device(target: Target) -> str:
    return " ".join(f"{v}" for v in target.device().values() if v) or "an unknown device"
