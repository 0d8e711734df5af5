"""How a configuration's keys become compiler options, per backend: the names each backend
takes as compiler options (the rest are kernel parameters) and the flags of the cpu and ptx
backends. The workers compile with them; the service turns an artifact's configuration into
the flags a build applies with the same functions."""

from __future__ import annotations

import re
import shlex
from typing import Any

from wire.contract import FailureReason
from wire.failures import TrialFailure

NO_ACF = ("", "none", None)

TRITON_COMPILE_OPTIONS = frozenset(
    {"num_warps", "num_stages", "maxnreg", "num_ctas", "enable_fp_fusion", "ptx_options", "acf"}
)
CUDA_PROGRAM_OPTIONS = frozenset(
    {
        "use_fast_math",
        "fma",
        "ftz",
        "prec_div",
        "prec_sqrt",
        "extra_device_vectorization",
        "max_register_count",
        "restrict",
        "ptxas_options",
        "acf",
    }
)

_OPT_LEVELS = {"-O0", "-O1", "-O2", "-O3", "-Os", "-Ofast"}
_MACRO = re.compile(r"^[A-Z][A-Z0-9_]*$")
_PTXAS_FLAGS = {"maxrregcount": "--maxrregcount", "opt_level": "--opt-level"}


def split_config(
    config: dict[str, Any], option_names: frozenset[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(compiler options, kernel parameters) of a configuration."""
    options = {k: v for k, v in config.items() if k in option_names}
    params = {k: v for k, v in config.items() if k not in option_names}
    return options, params


def macro_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def cpu_flags(config: dict[str, Any]) -> list[str]:
    """Compiler flags of a cpu-backend configuration; TrialFailure(ERROR) names an unknown key."""
    flags: list[str] = []
    for key in sorted(config):
        value = config[key]
        if key == "opt":
            level = value if str(value).startswith("-") else f"-{value}"
            if level not in _OPT_LEVELS:
                raise _config_error(f"opt={value!r} is not one of {sorted(_OPT_LEVELS)}")
            flags.append(level)
        elif key == "march_native":
            flags += ["-march=native", "-mtune=native"] if value else []
        elif key == "unroll":
            flags.append("-funroll-loops" if value else "-fno-unroll-loops")
        elif key == "vectorize":
            flags.append("-ftree-vectorize" if value else "-fno-tree-vectorize")
        elif key == "fast_math":
            flags += ["-ffast-math"] if value else []
        elif key == "inline_limit":
            flags.append(f"-finline-limit={int(value)}")
        elif key == "cflags":
            flags += shlex.split(str(value))
        elif _MACRO.match(key):
            macro = int(value) if isinstance(value, bool) else value
            flags.append(f"-D{key}={macro}")
        else:
            raise _config_error(
                f"unknown configuration key {key!r} for the cpu backend; known: opt, "
                "march_native, unroll, vectorize, fast_math, inline_limit, cflags, and "
                "UPPER_CASE kernel macros"
            )
    return flags


def ptxas_flags(config: dict[str, Any]) -> list[str]:
    """ptxas flags of a configuration's kernel parameters (its controls parameters aside)."""
    flags: list[str] = []
    for key in sorted(config):
        value = config[key]
        if key == "ptxas_options":
            flags += shlex.split(str(value or ""))
        elif key in _PTXAS_FLAGS:
            flags += [] if value in (None, 0, "") else [f"{_PTXAS_FLAGS[key]}={int(value)}"]
        else:
            raise _config_error(f"unknown configuration key {key!r} for the ptx backend; "
                                "it takes ptxas_options, maxrregcount, opt_level and compiler controls parameters")
    return flags


def _config_error(message: str) -> TrialFailure:
    return TrialFailure(FailureReason.ERROR, message)
