"""Backends by name. Each is imported only when first asked for, so a CPU-only install works
without the GPU backends' modules or their dependencies (triton, torch, CUDA).

A backend module registers itself implicitly: `get_backend("triton")` imports
`workers.backends.triton` (or `workers.backends.triton_backend`) and takes the concrete
`Backend` subclass in it whose `name` is "triton" (or a module-level `BACKEND` instance).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from types import ModuleType
from typing import Any

from workers.backends.base import Backend

log = logging.getLogger(__name__)

KNOWN_BACKENDS = ("cpu", "python", "triton", "cuda", "ptx")
_MODULES: dict[str, tuple[str, ...]] = {
    "cpu": ("workers.backends.cpu",),
    "python": ("workers.backends.python_backend",),
}
_instances: dict[str, Backend] = {}


class BackendUnavailable(Exception):
    """The backend is unknown or its module cannot be imported on this machine."""


def _candidate_modules(name: str) -> tuple[str, ...]:
    return _MODULES.get(name, (f"workers.backends.{name}", f"workers.backends.{name}_backend"))


def _backend_in(module: ModuleType, name: str) -> Backend | None:
    instance = getattr(module, "BACKEND", None)
    if isinstance(instance, Backend) and instance.name == name:
        return instance
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if (
            issubclass(obj, Backend)
            and not inspect.isabstract(obj)
            and getattr(obj, "name", None) == name
        ):
            return obj()
    return None


def get_backend(name: str) -> Backend:
    """The (process-wide) instance of backend `name`; BackendUnavailable if it cannot load."""
    if name in _instances:
        return _instances[name]
    errors = []
    for module_name in _candidate_modules(name):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # no such module: try the next spelling
            errors.append(f"{module_name}: {exc}")
            continue
        except ImportError as exc:
            errors.append(f"{module_name}: {exc}")
            continue
        backend = _backend_in(module, name)
        if backend is not None:
            _instances[name] = backend
            return backend
        errors.append(f"{module_name} defines no Backend named {name!r}")
    detail = "; ".join(errors) if errors else "no module for it is installed"
    raise BackendUnavailable(f"backend {name!r} is not available: {detail}")


def probe_backends(names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """probe() of each backend (all known ones by default); a backend that fails to import
    or to probe is reported unavailable with the reason, never raised."""
    results: dict[str, dict[str, Any]] = {}
    for name in names or list(KNOWN_BACKENDS):
        try:
            probe = dict(get_backend(name).probe())
        except BackendUnavailable as exc:
            probe = {"available": False, "reason": str(exc)}
        except Exception as exc:  # a broken GPU stack must not stop a CPU worker
            log.warning("probing backend %s failed: %s", name, exc)
            probe = {"available": False, "reason": f"probe failed: {exc}"}
        probe.setdefault("available", False)
        results[name] = probe
    return results


def needs_compile(backend: Backend) -> bool:
    """Whether the backend builds an artifact (the python backend has nothing to build)."""
    return bool(getattr(backend, "needs_compile", True))
