"""Kernels given by `module: package.path:function`: a function of a package installed on the
worker (a Triton JIT function such as Liger-Kernel's, or a cpu kernel of the same shape).

A study document's `kernel.module` travels as the kernel spec's `entry` with no `source`, so
workers of every contract version read the same spec; this module says which specs those are
and what identifies one (the service cannot read the package: the reference stands for it).
"""

from __future__ import annotations

import re

from wire.contract import KernelSpec

MODULE_TARGET = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def is_module_target(text: str | None) -> bool:
    return bool(text) and MODULE_TARGET.match(str(text)) is not None


def module_target(kernel: KernelSpec) -> str | None:
    """`package.path:function` of a kernel given by module (the python backend's own
    `module:function` objectives are not kernels of this kind), else None."""
    if kernel.builtin or kernel.backend == "python" or kernel.source is not None:
        return None
    return kernel.entry if is_module_target(kernel.entry) else None


def identity_text(kernel: KernelSpec) -> str:
    """What stands for a module kernel's source in hashes: the reference and the harness."""
    harness = kernel.options.get("harness_source") or kernel.options.get("harness") or ""
    return f"module {kernel.entry}\n{harness}"
