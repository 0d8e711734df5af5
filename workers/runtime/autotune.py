"""`@paretune_autotune`: a drop-in for `triton.autotune` that launches the approved
configuration of each call's shape bucket, offline.

    @paretune_autotune(kernel="fused_moe", key=["M", "N", "K"], configs=[triton.Config({...}), ...])
    @triton.jit
    def fused_moe_kernel(a_ptr, ..., M, N, K, BLOCK_SIZE_M: tl.constexpr, ...): ...

    fused_moe_kernel[grid](a, ..., M, N, K)  # the BLOCK_SIZE_M, ..., num_warps of M's approved artifact

The artifacts come from `artifacts=` (an ArtifactStore, or files, directories or bundles to
load) or else the bundle `PARETUNE_ARTIFACTS` names, verified against `public_keys=` or
`PARETUNE_PUBLIC_KEY` (a bundle's own key otherwise, with a warning). A call's shape is its
`key` arguments; each matches the workload dim of its name (`M` or `m`; `dims=` renames).
The call's bucket is the workload shape, among the artifacts of this kernel for this device,
equal in every key dim but the bucketed one (`bucket=`, the first key by default) and nearest
in that one, the smaller on a tie, as vLLM picks an M key. The artifacts measured at that shape
are then chosen between by the runtime's rules (wire.targets: exact toolchain first, else the
nearest with one ArtifactToolchainWarning). Resolutions are cached per key values.

No artifact for the shape (none configured, none for this device, none near the call): the
kernel runs with the given configs, as triton.autotune would (a Triton kernel is handed to
triton.autotune; a plain launcher, which needs no Triton, tries each of several configs once
per key values and keeps the fastest), with one ArtifactFallbackWarning per decorated kernel.
"""

from __future__ import annotations

import inspect
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from wire.artifact import ArtifactDocument, TrustedKeys
from wire.targets import Match, device_matches, select
from workers.runtime.apply import triton_config_arguments, triton_launch_options
from workers.runtime.store import ArtifactFallbackWarning, ArtifactStore, ArtifactToolchainWarning, _device

ArtifactSource = ArtifactStore | str | Path | Iterable[str | Path]


def config_kwargs(config: Any) -> dict[str, Any]:
    """A launch's keyword arguments from a triton.Config, or from a dict in triton.Config's
    form ({"kwargs": {...}, "num_warps": 4}) or a flat one."""
    if hasattr(config, "all_kwargs"):
        return dict(config.all_kwargs())
    config = dict(config)
    return {**config.pop("kwargs", {}), **config}


class ParetuneAutotuner:
    def __init__(self, fn: Callable[..., Any], kernel: str, key: Sequence[str], configs: Sequence[Any],
                 artifacts: ArtifactSource | None, public_keys: TrustedKeys | None, target: dict[str, Any] | None,
                 bucket: str | None, dims: dict[str, str] | None, options: dict[str, Any]) -> None:
        self.fn: Any = fn  # a triton JITFunction (launched as fn[grid](...)) or a plain callable
        self.kernel, self.key, self.configs = kernel, list(key), list(configs)
        self.bucket = bucket or self.key[0]
        self._dims = dims or {}
        self._source, self._public_keys, self._target = artifacts, public_keys, target
        self._options = options
        self._store: ArtifactStore | None = None
        self._loaded = False
        self._approved: dict[tuple[Any, ...], dict[str, Any] | None] = {}
        self._fastest: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._triton_autotuner: Any = None
        self._warned: set[type[Warning]] = set()
        self._arg_names = list(getattr(fn, "arg_names", None) or inspect.signature(fn).parameters)

    # -- launching ---------------------------------------------------------------------------

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._launch(None, args, kwargs)

    def _launch(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        values = self._key_values(args, kwargs)
        approved = self.config_for(**values)
        if approved is not None:
            return self._run(grid, args, {**kwargs, **approved})
        if self._is_triton_kernel():
            if self._triton_autotuner is None:
                import triton

                self._triton_autotuner = triton.autotune(configs=self.configs, key=self.key, **self._options)(self.fn)
            return self._triton_autotuner[grid](*args, **kwargs)
        return self._run(grid, args, {**kwargs, **self._fastest_config(grid, args, kwargs, values)})

    def _run(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.fn[grid](*args, **kwargs) if grid is not None else self.fn(*args, **kwargs)

    def _is_triton_kernel(self) -> bool:
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:
            return False
        return isinstance(self.fn, JITFunction)

    def _fastest_config(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                        values: dict[str, Any]) -> dict[str, Any]:
        """A plain launcher's fallback: the given config, or the fastest of several (timed once each)."""
        if not self.configs:
            raise ValueError(f"{self.kernel}: no approved configuration and no configs to fall back to")
        cached = tuple(values.values())
        if cached not in self._fastest:
            candidates = [config_kwargs(c) for c in self.configs]
            timings = []
            for candidate in candidates if len(candidates) > 1 else []:
                start = time.perf_counter()
                self._run(grid, args, {**kwargs, **candidate})
                timings.append(time.perf_counter() - start)
            self._fastest[cached] = candidates[timings.index(min(timings))] if timings else candidates[0]
        return self._fastest[cached]

    # -- resolving ---------------------------------------------------------------------------

    def _key_values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        values = {}
        for name in self.key:
            if name in kwargs:
                values[name] = kwargs[name]
            elif name in self._arg_names and self._arg_names.index(name) < len(args):
                values[name] = args[self._arg_names.index(name)]
            else:
                raise TypeError(f"{self.kernel}: the key argument {name!r} was not passed")
        return values

    def _dim(self, name: str, shapes: Iterable[dict[str, int]]) -> str:
        if name in self._dims:
            return self._dims[name]
        return name if any(name in dims for dims in shapes) else name.lower()

    def config_for(self, **values: Any) -> dict[str, Any] | None:
        """The approved launch arguments for a call with these key values; None: falling back."""
        cached = tuple(values[name] for name in self.key)
        if cached not in self._approved:
            self._approved[cached] = self._resolve(values)
        return self._approved[cached]

    def _resolve(self, values: dict[str, Any]) -> dict[str, Any] | None:
        match, why = self._match(values)
        if match is None:
            self._warn_once(ArtifactFallbackWarning, f"{why}; using the given configs")
            return None
        if not match.exact:
            self._warn_once(ArtifactToolchainWarning, f"applying {match.describe()}")
        controls = match.document.controls
        arguments = triton_config_arguments(controls)
        return {**arguments.pop("kwargs"), **arguments, **triton_launch_options(controls)}

    def _match(self, values: dict[str, Any]) -> tuple[Match | None, str]:
        """The artifact for these key values, or None and why there is none."""
        store = self._artifacts()
        if store is None:
            return None, f"no artifacts to resolve {self.kernel!r} from: pass artifacts= or set PARETUNE_ARTIFACTS"
        documents = [a.document for a in store.artifacts if a.document.kernel.name == self.kernel]
        backend = documents[0].kernel.backend if documents else "triton"
        here = store.target_for(backend)
        mine = [d for d in documents if device_matches(d.target, here)]
        shape = self._nearest_shape(mine, values)
        if shape is None:
            return None, (f"no approved configuration of {self.kernel!r} near {values} for {_device(here)} "
                          f"(artifacts of it: {len(documents)}, for this device: {len(mine)})")
        covering = [d for d in mine if any(_matches(s.dims, shape) for s in d.workload)]
        return select(covering, self.kernel, here, backend=backend), f"none of {self.kernel!r} for {_device(here)}"

    def _nearest_shape(self, documents: list[ArtifactDocument], values: dict[str, Any]) -> dict[str, int] | None:
        shapes = [s.dims for d in documents for s in d.workload]
        dims = {name: self._dim(name, shapes) for name in self.key}
        exact = {dims[name]: values[name] for name in self.key if name != self.bucket}
        bucket_dim, wanted = dims[self.bucket], values[self.bucket]
        near = [s for s in shapes if bucket_dim in s and all(s.get(d) == v for d, v in exact.items())]
        if not near:
            return None
        best = min(near, key=lambda s: (abs(s[bucket_dim] - wanted), s[bucket_dim]))
        return {**exact, bucket_dim: best[bucket_dim]}

    def _artifacts(self) -> ArtifactStore | None:
        if not self._loaded:
            source = self._source if self._source is not None else os.environ.get("PARETUNE_ARTIFACTS")
            keys = self._public_keys if self._public_keys is not None else os.environ.get("PARETUNE_PUBLIC_KEY")
            if isinstance(source, ArtifactStore):
                self._store = source
            elif source:
                self._store = ArtifactStore.load(source, keys, target=self._target)
            self._loaded = True
        return self._store

    def _warn_once(self, category: type[Warning], message: str) -> None:
        if category not in self._warned:
            self._warned.add(category)
            warnings.warn(message, category, stacklevel=5)


def _matches(dims: dict[str, int], shape: dict[str, int]) -> bool:
    return all(dims.get(name) == value for name, value in shape.items())


def paretune_autotune(kernel: str, key: Sequence[str], configs: Sequence[Any] = (), *,
                      artifacts: ArtifactSource | None = None, public_keys: TrustedKeys | None = None,
                      target: dict[str, Any] | None = None, bucket: str | None = None,
                      dims: dict[str, str] | None = None, **autotune_options: Any,
                      ) -> Callable[[Callable[..., Any]], ParetuneAutotuner]:
    """`@paretune_autotune(kernel=..., key=[...], configs=[...])` above `@triton.jit` (or a plain
    launcher): the approved configuration of the call's bucket, else `configs` (module docstring).
    `target` overrides detected target fields (as ArtifactStore.load's); other keyword
    arguments go to triton.autotune on fallback."""
    if not key:
        raise ValueError("key names at least one argument, as triton.autotune's")

    def decorate(fn: Callable[..., Any]) -> ParetuneAutotuner:
        return ParetuneAutotuner(fn, kernel, key, configs, artifacts, public_keys, target, bucket, dims,
                                 autotune_options)

    return decorate
