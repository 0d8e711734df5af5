"""Importing a kernel given by `module: package.path:function` (wire.modules) from the packages
installed on this worker, inside the trial's sandbox.

The package is the worker's, not the study's: a worker without it cannot run the trial
(`unsupported`, naming the package), and one whose import fails reports why. What a backend
reads of the object is what Triton's JIT functions carry: `src`, the kernel's source text,
and `__name__`; a cpu kernel of the same shape carries its C source as `src`.
"""

from __future__ import annotations

import importlib
import traceback
from importlib import metadata
from typing import Any

from wire.contract import FailureReason, KernelSpec
from wire.failures import TrialFailure
from wire.modules import module_target


def import_kernel(target: str) -> Any:
    """The object `package.path:function` names."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name.split(".")[0]):
            raise TrialFailure(FailureReason.UNSUPPORTED, f"{target}: this worker has no package {exc.name!r} "
                               "installed; install it where the worker runs, or send the kernel as source") from None
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"{target}: importing {module_name} failed: {exc}",
                           traceback.format_exc()) from None
    except Exception as exc:
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"{target}: importing {module_name} failed: "
                           f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
    kernel = getattr(module, attribute, None)
    if kernel is None:
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"{target}: {module_name} has no {attribute!r}")
    return kernel


def kernel_source(kernel: Any, target: str) -> str:
    source = getattr(kernel, "src", None)
    if not isinstance(source, str) or not source.strip():
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"{target} carries no kernel source (`src`): it is not a "
                           "Triton JIT function or a kernel of that shape")
    return source


def package_version(target: str) -> str | None:
    """The installed version of the distribution that provides `target`'s top-level package,
    read without importing it."""
    top = target.partition(":")[0].split(".")[0]
    for distribution in metadata.packages_distributions().get(top, []):
        try:
            return f"{distribution} {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def identity(kernel: KernelSpec) -> dict[str, Any]:
    """What a build of a module kernel depends on besides its configuration: the reference and
    the package's version (for a cache key, without importing the package)."""
    target = module_target(kernel)
    if target is None:
        return {}
    return {"module": target, "package": package_version(target) or "not installed"}
