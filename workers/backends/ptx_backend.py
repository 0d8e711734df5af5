"""The ptx backend: a PTX module the study sends, assembled by the worker's ptxas into a
cubin; compile-only (its objectives are what ptxas reports: registers, spills, stack frame,
shared memory, machine code size, compile time), so it needs no GPU.

Configuration keys: `ptxas_options` (a string of ptxas flags), `maxrregcount`, `opt_level`
(ptxas's --maxrregcount and --opt-level) and the kernel's compiler controls parameters
(Advanced Controls Files, applied with --apply-controls). Kernel options: `arch` (sm_90a),
else the study's target compute capability.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from wire.contract import FailureReason, KernelSpec, Metric
from wire.failures import TrialFailure
from wire.options import ptxas_flags
from workers.backends.base import Backend, CheckOutcome, CompiledKernel
from workers.compilers import controls, ptxas, toolchains

REPORT_FILE = "ptx-report.json"
SOURCE_FILE = "kernel.ptx"


class PtxBackend(Backend):
    name = "ptx"
    warm_by_default = True  # a trial costs its ptxas run, not a Python start

    def probe(self) -> dict[str, Any]:
        toolchain = toolchains.selected()
        if toolchain is None:
            return {"available": False, "reason": "no ptxas: install nvidia-cuda-nvcc (the acf extra)"}
        return {"available": True, "reason": "", "compilers": toolchain.describe(), "energy": False,
                "features": {"acf": True, "compile_only": True}}

    def cache_key(self, kernel: KernelSpec, config: dict[str, Any], compile_only: bool = False) -> str:
        toolchain = toolchains.selected()
        identity = {"source": hashlib.sha256((kernel.source or "").encode()).hexdigest(), "config": config,
                    "arch": kernel.options.get("arch") or kernel.options.get("compute_capability"),
                    "ptxas": toolchain.version if toolchain else None}
        return "ptx-" + hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]

    def compile(self, kernel: KernelSpec, config: dict[str, Any], workdir: Path,
                compile_only: bool = False) -> CompiledKernel:
        if not kernel.source:
            raise TrialFailure(FailureReason.ERROR, "a ptx kernel sends its PTX as `source`")
        toolchain = ptxas.toolchain()
        started = time.perf_counter()
        workdir.mkdir(parents=True, exist_ok=True)
        source = workdir / SOURCE_FILE
        source.write_text(kernel.source)
        files = controls.applied(kernel, config, workdir)
        acf = next((f for f in files if f.compiler == "ptxas"), None)
        assembled = ptxas.assemble(source, ptxas=toolchain.ptxas, arch=ptxas.compile_arch(kernel.options),
                                   options=ptxas_flags(controls.kernel_parameters(kernel, config)),
                                   acf=acf.path if acf else None, acf_release=acf.version if acf else None,
                                   version=toolchain.version)
        (workdir / "kernel.cubin").write_bytes(assembled.cubin)
        shapes = {"ptx": ptxas.shape_entry(assembled, time.perf_counter() - started)}
        report = {"compile_only": True, "toolchain": toolchain.describe(), "shapes": shapes,
                  "metrics": ptxas.summary(shapes), "acfs": {f.parameter: f.sha256 for f in files}}
        (workdir / REPORT_FILE).write_text(json.dumps(report))
        return CompiledKernel(directory=workdir, files={"report": REPORT_FILE, "cubin": "kernel.cubin"},
                              report=report, log=assembled.log)

    def check(self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel) -> CheckOutcome:
        return ptxas.compiled_check(built)

    def measure(self, kernel: KernelSpec, config: dict[str, Any], built: CompiledKernel, objectives: list[str],
                settings: Any) -> tuple[dict[str, Metric], dict[str, Any]]:
        return ptxas.metrics_of(built.report, objectives), {"compile_only": True}

