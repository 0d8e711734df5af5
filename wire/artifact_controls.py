"""An artifact's kernel identity and controls from a kernel spec and a configuration: the same
configuration split the way each tool takes it, the way the backends apply it.

cpu:    UPPER_CASE keys are macros (-D), the rest compiler flags (workers.backends.cpu); the
        `cc` flags are what the backend passes besides its -shared -fPIC -std=gnu11.
triton: num_warps, num_stages, num_ctas, maxnreg, enable_fp_fusion, ptx_options are Triton
        options, the rest constexpr meta-parameters; ptx_options and an ACF are `ptxas` flags.
cuda:   NVRTC options (fast math, fmad, ftz, ...) and macros give `nvrtc` flags as the backend
        compiles and the `nvcc` equivalent for a build; ptxas_options and an ACF go to ptxas.
ptx:    ptxas_options, maxrregcount, opt_level are `ptxas` flags.
An ACF named by the configuration (a controls parameter's sha256, whose bytes the caller
passes, or the older `acf` key naming the kernel's options.acf_files text) travels as bytes,
with the compiler release it is bound to; flags refer to it as `{acf}`.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import Any

from wire.artifact import ACF_PLACEHOLDER, AcfFile, Controls, KernelIdentity
from wire.contract import NO_CONTROLS, KernelSpec
from wire.failures import TrialFailure
from wire.modules import identity_text, module_target
from wire.options import (
    CUDA_PROGRAM_OPTIONS,
    NO_ACF,
    TRITON_COMPILE_OPTIONS,
    cpu_flags,
    macro_value,
    ptxas_flags,
    split_config,
)

_SWITCHES = {  # NVRTC and nvcc spell these the same
    "use_fast_math": "--use_fast_math",
    "extra_device_vectorization": "--extra-device-vectorization",
    "restrict": "--restrict",
}
_BOOLEANS = {"fma": "--fmad", "ftz": "--ftz", "prec_div": "--prec-div", "prec_sqrt": "--prec-sqrt"}
CUDA_STD = "c++17"


class ControlsError(ValueError):
    """The configuration cannot be carried by an artifact (e.g. an ACF that is a worker's path)."""


def kernel_source(kernel: KernelSpec) -> tuple[str, str, str | None]:
    """(name, source text, entry) of a built-in or study kernel."""
    if kernel.builtin:
        from wire.kernels import get_builtin

        builtin = get_builtin(kernel.backend, kernel.builtin)
        if builtin is None:
            raise ControlsError(f"no built-in {kernel.backend} kernel {kernel.builtin!r}")
        return builtin.name, kernel.source or builtin.read_source(), kernel.entry or builtin.entry
    target = module_target(kernel)
    if target is not None:
        return target, identity_text(kernel), target
    if not kernel.source:
        raise ControlsError("a kernel without `builtin` needs `source` or `module`")
    return kernel.entry or "kernel", kernel.source, kernel.entry


def kernel_identity(kernel: KernelSpec, name: str | None = None) -> KernelIdentity:
    """The kernel's name (the built-in's, else `name` or the entry symbol) and source hash."""
    default_name, source, entry = kernel_source(kernel)
    return KernelIdentity(
        name=name or default_name,
        backend=kernel.backend,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        entry=entry,
        builtin=kernel.builtin,
    )


def _options(kernel: KernelSpec) -> dict[str, Any]:
    if kernel.builtin:
        from wire.kernels import get_builtin

        builtin = get_builtin(kernel.backend, kernel.builtin)
        if builtin is not None:
            return {**builtin.options, **kernel.options}
    return dict(kernel.options)


def _builtin_defaults(kernel: KernelSpec) -> dict[str, Any]:
    from wire.kernels import get_builtin

    builtin = get_builtin(kernel.backend, kernel.builtin or "")
    return dict(builtin.default_config) if builtin is not None else {}


def _acf(config: dict[str, Any], options: dict[str, Any]) -> AcfFile | None:
    choice = config.get("acf")
    if choice in NO_ACF:
        return None
    files = options.get("acf_files") or {}
    if choice not in files:
        raise ControlsError(
            f"the configuration applies the ACF {choice!r}, which is not in the kernel's options.acf_files; "
            "an artifact carries only ACF files the study sent (a path on a worker cannot travel)"
        )
    return AcfFile.of(str(choice), str(files[choice]).encode())


def controls_for(kernel: KernelSpec, config: dict[str, Any], *, arch: str | None = None,
                 acfs: dict[str, AcfFile] | None = None) -> Controls:
    """The controls of `config` for `kernel`'s backend. `arch` ("sm_90") names the CUDA
    architecture when the kernel's options do not (the validated GPU's); `acfs` holds the
    files the configuration's controls parameters name, by sha256."""
    options = _options(kernel)
    if kernel.builtin and kernel.backend in ("triton", "cuda"):
        config = {**_builtin_defaults(kernel), **config}  # as the GPU backends resolve it
    if kernel.backend == "cpu":
        return _cpu(config, options)
    acf = _controls_file(kernel, config, acfs or {}) or _acf(config, options)
    params = {k: v for k, v in config.items() if k not in kernel.controls}
    if kernel.backend == "triton":
        return _triton(config, params, acf)
    if kernel.backend == "cuda":
        return _cuda(config, params, acf, options.get("arch") or arch)
    if kernel.backend == "ptx":
        return _ptx(config, params, acf)
    return Controls(config=dict(config))


def _controls_file(kernel: KernelSpec, config: dict[str, Any], acfs: dict[str, AcfFile]) -> AcfFile | None:
    """The file the configuration's controls parameter names (an artifact carries one)."""
    named = [(name, str(config[name])) for name in kernel.controls if config.get(name, NO_CONTROLS) != NO_CONTROLS]
    if len(named) > 1:
        names = ", ".join(n for n, _ in named)
        raise ControlsError(f"the configuration applies {len(named)} controls files ({names}); "
                            "an artifact carries one")
    if not named:
        return None
    name, sha = named[0]
    if sha not in acfs:
        raise ControlsError(f"the controls file {sha[:12]} ({name}) is not held by the service")
    return acfs[sha]


def _cpu(config: dict[str, Any], options: dict[str, Any]) -> Controls:
    try:
        flags = cpu_flags(config)
    except TrialFailure as exc:
        raise ControlsError(exc.message) from None
    meta = {k: v for k, v in config.items() if k.isupper()}
    return Controls(
        config=dict(config),
        meta_parameters=meta,
        flags={"cc": [*flags, *map(str, options.get("cflags", []))]},
    )


def _triton(config: dict[str, Any], params: dict[str, Any], acf: AcfFile | None) -> Controls:
    compile_options, meta = split_config(params, TRITON_COMPILE_OPTIONS)
    compile_options.pop("acf", None)
    ptxas = shlex.split(str(compile_options.get("ptx_options") or ""))
    if acf is not None:
        ptxas += ["--apply-controls", ACF_PLACEHOLDER]
    if not compile_options.get("maxnreg"):
        compile_options.pop("maxnreg", None)
    return Controls(
        config=dict(config),
        meta_parameters=meta,
        triton_options=compile_options,
        flags={"ptxas": ptxas} if ptxas else {},
        acf=acf,
    )


def _ptx(config: dict[str, Any], params: dict[str, Any], acf: AcfFile | None) -> Controls:
    try:
        ptxas = ptxas_flags(params)
    except TrialFailure as exc:
        raise ControlsError(exc.message) from None
    if acf is not None:
        ptxas += ["--apply-controls", ACF_PLACEHOLDER]
    return Controls(config=dict(config), flags={"ptxas": ptxas} if ptxas else {}, acf=acf)


def _cuda(config: dict[str, Any], params: dict[str, Any], acf: AcfFile | None, arch: str | None) -> Controls:
    program, macros = split_config(params, CUDA_PROGRAM_OPTIONS)
    program.pop("acf", None)
    ptxas = shlex.split(str(program.get("ptxas_options") or ""))
    if acf is not None:
        ptxas += ["--apply-controls", ACF_PLACEHOLDER]
    common = [f"--std={CUDA_STD}"]
    for key, flag in _SWITCHES.items():
        if program.get(key):
            common.append(flag)
    for key, flag in _BOOLEANS.items():
        if program.get(key) is not None:
            common.append(f"{flag}={'true' if program[key] else 'false'}")
    if program.get("max_register_count"):
        common.append(f"--maxrregcount={int(program['max_register_count'])}")
    defines = [f"-D{name}={macro_value(value)}" for name, value in macros.items()]
    architecture = [f"--gpu-architecture={arch}"] if arch else []
    flags = {
        "nvrtc": [*architecture, *common, *defines, *(f"--ptxas-options={p}" for p in ptxas)],
        "nvcc": [*architecture, *common, *defines, *([f"--ptxas-options={','.join(ptxas)}"] if ptxas else [])],
    }
    if ptxas:
        flags["ptxas"] = ptxas
    return Controls(config=dict(config), meta_parameters=macros, arch=arch, flags=flags, acf=acf)
