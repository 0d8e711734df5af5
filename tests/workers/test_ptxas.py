"""The compile-only path on a CPU: Triton lowers a built-in to PTX for sm_90a, the pinned
ptxas assembles it with an ACF CompileIQ generated, and the report and the cubin's machine
code size are read back; another ptxas release refuses the ACF as unsupported."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from acf_support import engine_acfs, gemm_ptx, needs_catalog, ptxas_13_3, ptxas_other

from wire.contract import ControlsParameter, FailureReason, KernelSpec
from wire.failures import TrialFailure
from workers.compilers import controls, ptxas

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90a'
ptxas info    : Function properties for first
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compile time = 3.1 ms
ptxas info    : Compiling entry function 'second' for 'sm_90a'
ptxas info    : Function properties for second
    0 bytes stack frame, 20 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers
"""


def test_report_takes_the_most_of_each_function() -> None:
    assert ptxas.parse_report(LOG) == {"stack_frame_bytes": 8, "spill_store_bytes": 20, "spill_load_bytes": 12,
                                       "registers": 96, "smem_bytes": 2048, "spill_bytes": 20}


def test_arch_follows_triton() -> None:
    assert [ptxas.arch_of(cc) for cc in ("8.0", "9.0", "10.0")] == ["sm_80", "sm_90a", "sm_100a"]


def test_machine_code_size_against_cuobjdump(tmp_path: Path) -> None:
    ptx = gemm_ptx(tmp_path)
    assembled = ptxas.assemble(ptx, ptxas=ptxas_13_3(), arch="sm_90a", options=[], acf=None)
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    (tmp_path / "k.cubin").write_bytes(assembled.cubin)
    listing = subprocess.run([str(cuobjdump), "-elf", str(tmp_path / "k.cubin")], capture_output=True, text=True,
                             check=True).stdout
    # the section table: "index offset size ... PROGBITS ... .text.<kernel>", sizes in hex
    sizes = [int(m.group(1), 16) for m in re.finditer(r"^\s*\d+\s+[0-9a-f]+\s+([0-9a-f]+)\s.*\s\.text\.\S+$",
                                                      listing, re.MULTILINE)]
    assert sizes and ptxas.text_bytes(assembled.cubin) == sum(sizes)
    assert assembled.metrics()["registers"] > 0 and "Compile time" not in assembled.log


@needs_catalog
def test_an_acf_changes_the_code_and_another_release_refuses_it(tmp_path: Path) -> None:
    ptx = gemm_ptx(tmp_path, {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4})
    plain = ptxas.assemble(ptx, ptxas=ptxas_13_3(), arch="sm_90a", options=[], acf=None)
    reports = set()
    for index, content in enumerate(engine_acfs()):
        path = tmp_path / f"{index}.acf"
        path.write_bytes(content)
        applied = ptxas.assemble(ptx, ptxas=ptxas_13_3(), arch="sm_90a", options=[], acf=path)
        reports.add((applied.metrics()["registers"], applied.metrics()["sass_bytes"]))
        again = ptxas.assemble(ptx, ptxas=ptxas_13_3(), arch="sm_90a", options=[], acf=path)
        assert again.log == applied.log and again.cubin == applied.cubin  # the same file, the same code
    assert reports - {(plain.metrics()["registers"], plain.metrics()["sass_bytes"])}
    with pytest.raises(TrialFailure) as refused:
        ptxas.assemble(ptx, ptxas=ptxas_other(), arch="sm_90a", options=[], acf=tmp_path / "0.acf",
                       acf_release="13.3", version="13.5.37")
    assert refused.value.reason == FailureReason.UNSUPPORTED
    assert "13.3" in refused.value.message and "13.5.37" in refused.value.message
    assert ptxas.INVALID_CONTROLS in refused.value.log


def test_a_bad_ptx_is_a_compile_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k() { not an instruction; }\n")
    with pytest.raises(TrialFailure) as failed:
        ptxas.assemble(bad, ptxas=ptxas_13_3(), arch="sm_90a", options=[], acf=None)
    assert failed.value.reason == FailureReason.COMPILE_ERROR


def test_controls_files_are_checked_and_found(tmp_path: Path) -> None:
    import base64
    import hashlib

    from wire.contract import ControlsFile

    content = b"\x01\x02controls"
    sha = hashlib.sha256(content).hexdigest()
    with pytest.raises(TrialFailure):
        controls.write([ControlsFile(sha256="0" * 64, content_base64=base64.b64encode(content).decode())], tmp_path)
    controls.write([ControlsFile(sha256=sha, content_base64=base64.b64encode(content).decode())], tmp_path)
    kernel = KernelSpec(backend="ptx", controls={"acf": ControlsParameter(compiler="ptxas", version="13.3")})
    (found,) = controls.applied(kernel, {"acf": sha, "maxrregcount": 64}, tmp_path)
    assert found.path.read_bytes() == content and found.flags() == ["--apply-controls", str(found.path)]
    assert controls.applied(kernel, {"acf": "none"}, tmp_path) == []
    assert controls.kernel_parameters(kernel, {"acf": sha, "maxrregcount": 64}) == {"maxrregcount": 64}
    with pytest.raises(TrialFailure) as missing:
        controls.applied(kernel, {"acf": "f" * 64}, tmp_path)
    assert "did not carry" in missing.value.message
