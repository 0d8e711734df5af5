"""One PTX module assembled by ptxas into a cubin, with what ptxas reports of it.

This is the compile-only path (no GPU, no driver): the ptx backend assembles a study's PTX,
the triton backend the PTX Triton lowers a configuration to. An Advanced Controls File is
applied with `--apply-controls`; a ptxas of another release refuses it with "Invalid
compiler controls file", which fails the trial as `unsupported` (the file is bound to the
release it was generated for), never as a compile error of the configuration.

The report kept with a trial is ptxas's `-v` output without its "Compile time" lines (the
only part that changes from one run to the next), so that applying the same file to the same
PTX with the same ptxas gives it back byte for byte.
"""

from __future__ import annotations

import re
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.contract import COMPILE_METRICS, FailureReason, Metric
from wire.failures import TrialFailure
from workers.backends.base import CheckOutcome, CompiledKernel
from workers.compilers import toolchains
from workers.compilers.toolchains import Toolchain

INVALID_CONTROLS = "Invalid compiler controls file"
_FUNCTION = re.compile(r"Compiling entry function '([^']+)'")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_COMPILE_TIME = re.compile(r"^.*Compile time = .*$\n?", re.MULTILINE)


@dataclass
class Assembled:
    cubin: bytes
    log: str  # ptxas -v, without its compile-time lines
    seconds: float
    command: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, int]:
        """The compile metrics (wire.contract.COMPILE_METRICS) of this cubin, but compile_s."""
        report = parse_report(self.log)
        return {**report, "sass_bytes": text_bytes(self.cubin)}


def parse_report(log: str) -> dict[str, int]:
    """Registers, spills, stack frame and shared memory from ptxas -v output: the most of
    any function it compiled (each is a per-thread or per-block figure of one kernel)."""
    functions: list[dict[str, int]] = []
    for line in log.splitlines():
        if _FUNCTION.search(line):
            functions.append({})
            continue
        if not functions:
            continue
        current = functions[-1]
        if match := _FRAME.search(line):
            current["stack_frame_bytes"] = int(match.group(1))
            current["spill_store_bytes"] = int(match.group(2))
            current["spill_load_bytes"] = int(match.group(3))
        if match := _REGISTERS.search(line):
            current["registers"] = int(match.group(1))
        if match := _SMEM.search(line):
            current["smem_bytes"] = int(match.group(1))
    report: dict[str, int] = {}
    for function in functions:
        function.setdefault("smem_bytes", 0)
        function["spill_bytes"] = function.get("spill_store_bytes", 0) + function.get("spill_load_bytes", 0)
        for name, value in function.items():
            report[name] = max(report.get(name, 0), value)
    return report


def text_bytes(cubin: bytes) -> int:
    """The size of a cubin's machine code: its .text sections (one per kernel and device
    function), read from the ELF section headers."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(cubin) or shstrndx >= shnum:
        raise ValueError("the ELF section headers run past the end of the file")

    def header(index: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + index * shentsize)
        return name, offset, size

    _, names_at, names_size = header(shstrndx)
    names = cubin[names_at:names_at + names_size]
    total = 0
    for index in range(shnum):
        name_at, _, size = header(index)
        name = names[name_at:names.find(b"\0", name_at)]
        if name == b".text" or name.startswith(b".text."):
            total += size
    return total


def assemble(ptx: Path, *, ptxas: Path, arch: str, options: list[str], acf: Path | None,
             acf_release: str | None = None, version: str | None = None) -> Assembled:
    """ptxas -v on `ptx` for `arch` (sm_90a) with `options` and the ACF, if any. A refused
    ACF fails the trial as `unsupported`, naming both releases; any other error as a
    compile error with ptxas's message."""
    cubin_path = ptx.with_suffix(".cubin")
    controls = ["--apply-controls", str(acf)] if acf is not None else []
    command = [str(ptxas), "-v", f"--gpu-name={arch}", *options, *controls, str(ptx), "-o", str(cubin_path)]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TrialFailure(FailureReason.UNSUPPORTED, f"cannot run ptxas {ptxas}: {exc}") from None
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        if acf is not None and INVALID_CONTROLS in log:
            raise TrialFailure(
                FailureReason.UNSUPPORTED,
                f"ptxas {version or '?'} refused the Advanced Controls File ({INVALID_CONTROLS}): it was "
                f"generated for ptxas {acf_release or '?'}, and an ACF applies only with the compiler release "
                f"it was generated for; run the study on workers whose toolchain is {acf_release or 'that release'}",
                log=log,
            )
        first = next((line for line in log.splitlines() if "error" in line.lower() or "fatal" in line.lower()),
                     log.strip()[:500])
        raise TrialFailure(FailureReason.COMPILE_ERROR, f"ptxas failed (exit {done.returncode}): {first}", log=log)
    return Assembled(cubin_path.read_bytes(), _COMPILE_TIME.sub("", log), seconds, command)


def toolchain() -> Toolchain:
    """The toolchain compile-only trials assemble with, or a TrialFailure saying how to get one."""
    selected = toolchains.selected()
    if selected is None:
        raise TrialFailure(FailureReason.UNSUPPORTED, "compile-only trials need a ptxas: install nvidia-cuda-nvcc "
                           "(the acf extra) or give the worker --toolchain")
    return selected


def arch_of(compute_capability: str) -> str:
    """ptxas's --gpu-name for a compute capability ("9.0" -> sm_90a), as Triton names it:
    the architecture-specific "a" target from 9.0 on."""
    major, _, minor = compute_capability.partition(".")
    capability = int(major) * 10 + int(minor or 0)
    return f"sm_{capability}{'a' if capability >= 90 else ''}"


def compile_arch(options: dict[str, Any]) -> str:
    """The architecture a compile-only kernel is assembled for: options.arch, else the
    study's target compute capability (the service puts it in options.compute_capability)."""
    if options.get("arch"):
        return str(options["arch"])
    if options.get("compute_capability"):
        return arch_of(str(options["compute_capability"]))
    raise TrialFailure(
        FailureReason.ERROR,
        "a compile-only kernel needs a target: set the study's target.compute_capability (or kernel.options.arch)",
    )


def shape_entry(assembled: Assembled, seconds: float) -> dict[str, Any]:
    """What a compile-only build records of one shape (seconds: the whole compile of it)."""
    return {"metrics": {**assembled.metrics(), "compile_s": seconds}, "ptxas_s": assembled.seconds,
            "ptxas_log": assembled.log, "ptxas_command": assembled.command[1:-3]}


def summary(shapes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """A build's compile metrics over its shapes: the most of each, compile time summed."""
    total: dict[str, float] = {}
    for entry in shapes.values():
        for name, value in entry["metrics"].items():
            total[name] = total.get(name, 0) + value if name == "compile_s" else max(total.get(name, value), value)
    return total


def metrics_of(report: dict[str, Any], objectives: list[str]) -> dict[str, Metric]:
    """A compile-only build's objectives as metrics (one exact reading each)."""
    values = report.get("metrics") or {}
    missing = [name for name in objectives if name not in values]
    if missing:
        raise TrialFailure(FailureReason.ERROR, f"the build reports no {', '.join(missing)}")
    return {name: Metric(value=float(values[name]), unit=COMPILE_METRICS[name][0], n=1) for name in objectives}


def compiled_check(built: CompiledKernel) -> CheckOutcome:
    """The check of a compile-only build: it compiled for every shape; nothing ran."""
    shapes = {key: {"passed": True} for key in (built.report.get("shapes") or {})}
    return CheckOutcome(passed=bool(shapes), details={"scope": "compiled", "shapes": shapes})
