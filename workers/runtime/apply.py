"""Turning an artifact's controls into what a kernel launch or a build takes.

Triton: the meta-parameters and the options triton.Config accepts (num_warps, num_stages,
num_ctas, maxnreg) make one triton.Config; the other compile options (enable_fp_fusion,
ptx_options, where an ACF goes) are launch options, passed with the kernel's arguments.
CUDA and C: the flags of a tool (nvcc, nvrtc, ptxas, cc), with `{acf}` replaced by the path
of the carried ACF file, written (once, by its sha256) into a directory.
triton is imported only by the functions that return triton objects.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from wire.artifact import ACF_PLACEHOLDER, AcfFile, Controls

TRITON_CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def triton_config_arguments(controls: Controls) -> dict[str, Any]:
    """Keyword arguments of triton.Config: {"kwargs": meta-parameters, "num_warps": ..., ...}."""
    options = {k: v for k, v in controls.triton_options.items() if k in TRITON_CONFIG_OPTIONS and v is not None}
    return {"kwargs": dict(controls.meta_parameters), **options}


class ControlsRefused(ValueError):
    """The artifact's ACF is bound to another compiler release than the one that would apply it."""


def triton_launch_options(controls: Controls, acf_dir: Path | None = None) -> dict[str, Any]:
    """Compile options triton.Config does not carry: pass them at launch (kernel[grid](..., **these)).
    A carried ACF is applied only when Triton's ptxas (TRITON_PTXAS_PATH) is of its release."""
    options = {k: v for k, v in controls.triton_options.items() if k not in TRITON_CONFIG_OPTIONS}
    ptx = flags_for(controls, "ptxas", acf_dir, compiler_version=triton_ptxas_version() if controls.acf else None)
    if ptx:
        options["ptx_options"] = " ".join(ptx)
    else:
        options.pop("ptx_options", None)
    return options


def triton_config(controls: Controls) -> Any:
    import triton

    return triton.Config(**triton_config_arguments(controls))


def flags_for(controls: Controls, tool: str, acf_dir: Path | None = None,
              compiler_version: str | None = None) -> list[str]:
    """The tool's arguments, the ACF placeholder replaced by the written file's path; an ACF
    bound to a compiler release is applied only by a compiler (`compiler_version`, its exact
    version) of that release, else ControlsRefused names both."""
    flags = list(controls.flags.get(tool, []))
    if not any(ACF_PLACEHOLDER in flag for flag in flags):
        return flags
    if controls.acf is None:
        raise ValueError(f"the {tool} flags refer to an ACF file the artifact does not carry")
    refusal = controls.acf.refusal(compiler_version)
    if refusal:
        raise ControlsRefused(refusal)
    path = str(write_acf(controls.acf, acf_dir or default_acf_dir()))
    return [flag.replace(ACF_PLACEHOLDER, path) for flag in flags]


def triton_ptxas_version() -> str | None:
    """The exact version of the ptxas Triton compiles with here (TRITON_PTXAS_PATH, else its own)."""
    from workers.compilers import toolchains

    path = toolchains.triton_ptxas_path()
    return toolchains.ptxas_version(path) if path and Path(path).is_file() else None


def default_acf_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "paretune" / "acf"


def write_acf(acf: AcfFile, directory: Path) -> Path:
    """The ACF's bytes in `directory`, named by their sha256 (written once, atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{acf.sha256[:16]}-{_UNSAFE.sub('_', acf.name)}.acf"
    content = acf.content()
    if path.is_file() and path.read_bytes() == content:
        return path
    handle, temporary = tempfile.mkstemp(prefix=".acf-", dir=directory)
    with os.fdopen(handle, "wb") as out:
        out.write(content)
    os.replace(temporary, path)
    return path
