"""Compile-only Triton trials (their objectives are compile metrics): no GPU, no driver, no
torch. The kernel is lowered to PTX for the study's target, specialised as Triton's launcher
specialises a real launch (the harness's `compile_arguments(dims)` gives the runtime
arguments' types and values), and the worker's ptxas assembles it with the configuration's
ptxas options and ACF, reporting what it used (workers.compilers.ptxas).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from wire.contract import FailureReason, KernelSpec
from wire.failures import TrialFailure
from workers.backends.base import CompiledKernel
from workers.backends.gpu_loader import GpuKernel, load_module, require, shape_key
from workers.backends.triton_kernel import (
    COMPILE_HARNESS,
    REPORT_FILE,
    SOURCE_DIR,
    compile_options,
    jit_of,
    meta_parameters,
)
from workers.compilers import controls, ptxas
from workers.measure.gpu_toolchain import package_version


def build(kernel: KernelSpec, resolved: GpuKernel, workdir: Path) -> CompiledKernel:
    """Lower the kernel to PTX for the study's target on every shape and assemble it with
    the worker's ptxas: no GPU, no driver, no torch."""
    import triton
    from triton.backends.compiler import GPUTarget

    toolchain = ptxas.toolchain()
    arch = ptxas.compile_arch(resolved.options)
    files = controls.applied(kernel, resolved.config, workdir)
    acf = next((f for f in files if f.compiler == "ptxas"), None)
    resolved.config = controls.kernel_parameters(kernel, resolved.config)
    module = load_module(resolved.source, workdir / SOURCE_DIR, "kernel")
    require(module, COMPILE_HARNESS)
    jit = jit_of(module, resolved)
    options = compile_options(resolved.config, [])
    extra = shlex.split(str(options.pop("ptx_options", "")))
    if options.get("enable_fp_fusion") is False:
        extra.insert(0, "--fmad=false")  # as Triton asks its ptxas
    target = GPUTarget("cuda", int(arch[3:].rstrip("a")), 32)
    shapes: dict[str, dict[str, Any]] = {}
    for shape in resolved.workload:
        key = shape_key(shape.dims)
        started = time.perf_counter()
        try:
            source = specialised_source(jit, list(module.compile_arguments(shape.dims)),
                                        meta_parameters(resolved, module, shape.dims))
            lowered = triton.compile(source, target=target, options=options)
        except TrialFailure:
            raise
        except Exception as exc:
            raise TrialFailure(FailureReason.COMPILE_ERROR, f"Triton: {type(exc).__name__}: {exc}"[:2000],
                               log=f"{type(exc).__name__}: {exc}") from exc
        ptx = workdir / f"{key}.ptx"
        ptx.write_text(lowered.asm["ptx"])
        assembled = ptxas.assemble(ptx, ptxas=toolchain.ptxas, arch=arch, options=extra,
                                   acf=acf.path if acf else None, acf_release=acf.version if acf else None,
                                   version=toolchain.version)
        ptx.with_suffix(".cubin").write_bytes(assembled.cubin)
        shapes[key] = ptxas.shape_entry(assembled, time.perf_counter() - started)
    report = {"compile_only": True, "arch": arch, "options": options, "ptxas_options": extra,
              "triton": package_version("triton"), "toolchain": toolchain.describe(), "shapes": shapes,
              "metrics": ptxas.summary(shapes), "acfs": {f.parameter: f.sha256 for f in files}}
    (workdir / REPORT_FILE).write_text(json.dumps(report, default=str))
    return CompiledKernel(directory=workdir, files={"report": REPORT_FILE}, report=report,
                          log="\n".join(entry["ptxas_log"] for entry in shapes.values()))


def specialised_source(jit: Any, values: list[Any], meta: dict[str, Any]) -> Any:
    """Triton's ASTSource for a launch with these runtime argument values (a pointer given
    as its type, "*bf16") and constexprs, specialised as Triton's launcher specialises a
    real launch: integers equal to 1 become constants, those divisible by 16 and every
    pointer (torch allocations are aligned) carry the divisibility hint."""
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource
    from triton.runtime.jit import native_specialize_impl

    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    given = iter(values)
    for index, param in enumerate(jit.params):
        if param.is_constexpr:
            if param.name not in meta:
                raise TrialFailure(FailureReason.ERROR, f"no value for the kernel's constexpr {param.name!r}")
            signature[param.name], constants[param.name] = "constexpr", meta[param.name]
            continue
        value = next(given, None)
        if value is None:
            raise TrialFailure(FailureReason.ERROR, f"compile_arguments gives no value for {param.name!r}")
        kind, hint = (value, "D") if isinstance(value, str) else native_specialize_impl(BaseBackend, value, False,
                                                                                        True, True)
        signature[param.name] = kind
        if kind == "constexpr":
            constants[param.name] = hint
        elif hint == "D":
            attrs[(index,)] = BaseBackend.parse_attr(hint)
    return ASTSource(jit, signature, constants, attrs)
