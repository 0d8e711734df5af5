"""The built-in GPU kernels' resource models against what the H200 recorded: every trial
that failed with Triton's OutOfResources is predicted infeasible (with the byte count Triton
reported), every configuration that ran is predicted feasible, and the shared memory of the
kernels that compiled is the model's. The records are the exhaustive GEMM sweeps and every
study of bench/results/gpu_raw_*; the limit is Triton's own "Hardware limit" figure."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from wire.contract import DeviceLimits, FailureReason, KernelSpec
from wire.failures import TrialFailure
from wire.kernels import get_builtin, resource_violations
from wire.kernels.resources import (
    KNOWN_LIMITS,
    ResourceUse,
    Violation,
    check,
    describe,
    parse_refusals,
    violations,
)
from workers.backends.gpu_loader import refuse_compiled, refuse_unlaunchable, resolve
from workers.measure.gpu_limits import limits_from_properties

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
H200 = KNOWN_LIMITS["9.0"]
REQUIRED = re.compile(r"out of resource: shared memory, Required: (\d+), Hardware limit: (\d+)")
KERNELS = {"gemm": ("triton", "gemm_bf16"), "attention": ("triton", "attention_fwd"), "rmsnorm": ("cuda", "rmsnorm")}


def recorded() -> list[dict[str, Any]]:
    """Every finished trial the H200 recorded: kernel, configuration, outcome, message, and
    the compiled shared memory where it compiled."""
    rows = []
    for path in sorted(RESULTS.glob("gpu_raw_*/sweep.json")):
        sweep = json.loads(path.read_text())
        kernel = next(short for short, (_, name) in KERNELS.items() if name == sweep["kernel"])
        for row in sweep["rows"]:
            rows.append({"kernel": kernel, "config": row["config"], "ok": row["status"] == "completed",
                         "message": row.get("message") or "", "smem": None, "source": path.parent.name})
    for path in sorted(RESULTS.glob("gpu_raw_*/studies.json")):
        for name, study in json.loads(path.read_text())["studies"].items():
            for trial in study["trials"]:
                if trial["state"] not in ("completed", "failed"):
                    continue
                shapes = (trial.get("compile_report") or {}).get("shapes") or {}
                smem = {s.get("smem_bytes") for s in shapes.values()} - {None}
                rows.append({"kernel": name, "config": trial["config"], "ok": trial["state"] == "completed",
                             "message": trial.get("message") or "", "smem": max(smem) if smem else None,
                             "source": path.parent.name})
    return rows


def workload(kernel: str) -> list[dict[str, int]]:
    backend, name = KERNELS[kernel]
    builtin = get_builtin(backend, name)
    assert builtin is not None
    return [shape["dims"] for shape in builtin.workload]


def predicted(kernel: str, config: dict[str, Any]) -> list[Violation]:
    backend, name = KERNELS[kernel]
    return resource_violations(backend, name, config, workload(kernel), H200)


def test_the_table_has_the_h200_limit_triton_reported() -> None:
    limits = {int(m.group(2)) for row in recorded() if (m := REQUIRED.search(row["message"]))}
    assert limits == {H200.shared_memory_per_block} == {232448}
    assert (H200.threads_per_block, H200.registers_per_block) == (1024, 65536)


def test_every_recorded_out_of_resources_failure_is_predicted_with_its_byte_count() -> None:
    failures = [row for row in recorded() if not row["ok"]]
    assert len(failures) >= 74 + 100  # the sweeps' 74 each, and the studies' GEMM and attention failures
    assert {row["kernel"] for row in failures} == {"gemm", "attention"}
    for row in failures:
        match = REQUIRED.search(row["message"])
        assert match, row  # every recorded failure of these kernels ran out of shared memory
        found = predicted(row["kernel"], row["config"])
        assert [(v.resource, v.required, v.limit) for v in found] == [
            ("shared memory", int(match.group(1)), int(match.group(2)))], row


def test_every_recorded_success_is_predicted_feasible() -> None:
    successes = [row for row in recorded() if row["ok"]]
    assert {row["kernel"] for row in successes} == {"gemm", "attention", "rmsnorm"}
    assert len(successes) > 600
    for row in successes:
        assert predicted(row["kernel"], row["config"]) == [], row


def test_the_model_is_the_shared_memory_of_what_compiled() -> None:
    """Not only on the right side of the limit: the very bytes the compiled kernels use."""
    compiled = [row for row in recorded() if row["ok"] and row["smem"] is not None]
    assert {row["kernel"] for row in compiled} == {"gemm", "attention"}
    for row in compiled:
        backend, name = KERNELS[row["kernel"]]
        builtin = get_builtin(backend, name)
        assert builtin is not None and builtin.resources is not None
        config = {**builtin.default_config, **row["config"]}
        use = max((builtin.resources(config, dims) for dims in workload(row["kernel"])),
                  key=lambda u: u.shared_bytes or 0)
        assert use.shared_bytes == row["smem"], row
        assert use.threads == config["num_warps"] * 32


def test_the_gemm_space_is_split_as_the_sweep_found() -> None:
    sweep = json.loads((RESULTS / "gpu_raw_2026-11-29" / "sweep.json").read_text())
    failed = {json.dumps(r["config"], sort_keys=True) for r in sweep["rows"] if r["status"] != "completed"}
    refused = {json.dumps(r["config"], sort_keys=True) for r in sweep["rows"] if predicted("gemm", r["config"])}
    assert len(sweep["rows"]) == 270 and refused == failed and len(failed) == 74


def test_the_attention_space_is_split_as_its_sweep_found() -> None:
    """The attention kernel's exhaustive sweep on the H200 (recorded after the model was
    written): exactly the configurations that failed to compile are refused."""
    sweep = json.loads((RESULTS / "gpu_raw_2026-11-30" / "attention_sweep" / "sweep.json").read_text())
    failed = {json.dumps(r["config"], sort_keys=True) for r in sweep["rows"] if r["status"] != "completed"}
    refused = {json.dumps(r["config"], sort_keys=True) for r in sweep["rows"] if predicted("attention", r["config"])}
    assert len(sweep["rows"]) == 96 and refused == failed and len(failed) == 8


def test_rmsnorm_uses_one_float_per_warp_and_its_block_of_threads() -> None:
    builtin = get_builtin("cuda", "rmsnorm")
    assert builtin is not None and builtin.resources is not None
    # ptxas reported 128 bytes of shared memory for 1024 threads on the H200
    assert builtin.resources({**builtin.default_config, "THREADS": 1024}, {"rows": 1, "cols": 8192}) == ResourceUse(
        shared_bytes=128, threads=1024)
    too_big = {**builtin.default_config, "THREADS": 2048}
    assert [v.resource for v in resource_violations("cuda", "rmsnorm", too_big, workload("rmsnorm"), H200)] == [
        "threads"]


def test_violations_of_each_limit() -> None:
    limits = DeviceLimits(shared_memory_per_block=1000, threads_per_block=256, registers_per_block=8192,
                          registers_per_thread=64)
    assert violations(ResourceUse(shared_bytes=1000, threads=256, registers_per_thread=32), limits) == []
    found = violations(ResourceUse(shared_bytes=1001, threads=512, registers_per_thread=200), limits)
    # registers per thread are capped at the device's 64: 64 * 512 = 32768 > 8192
    assert [(v.resource, v.required, v.limit) for v in found] == [
        ("shared memory", 1001, 1000), ("threads", 512, 256), ("registers", 32768, 8192)]
    assert found[0].excess == pytest.approx(0.001)
    assert violations(ResourceUse(), limits) == []  # a model that says nothing refuses nothing


def test_a_workload_is_refused_at_its_largest_requirement() -> None:
    def model(config: dict[str, Any], dims: dict[str, int]) -> ResourceUse:
        return ResourceUse(shared_bytes=dims["d"] * 100)

    found = check(model, {}, [{"d": 20}, {"d": 50}, {"d": 5}], DeviceLimits(shared_memory_per_block=1000))
    assert [(v.required, v.limit) for v in found] == [(5000, 1000)]


def test_messages_read_back_as_the_violations_they_name() -> None:
    found = [Violation("shared memory", 491520, 232448), Violation("threads", 2048, 1024)]
    text = describe(found, H200)
    assert text.startswith("cannot launch on sm_90: ")
    assert parse_refusals(text) == found
    triton = ("OutOfResources: out of resource: shared memory, Required: 491520, Hardware limit: 232448. "
              "Reducing block sizes or `num_stages` may help.")
    assert parse_refusals(triton) == found[:1]


def test_device_limits_from_torch_properties_with_the_table_filling_gaps() -> None:
    class Properties:
        shared_memory_per_block_optin = 232448
        max_threads_per_block = 1024
        regs_per_multiprocessor = 65536

    assert limits_from_properties(9, 0, Properties()) == H200

    class Older:  # a torch without these attributes: the table's figures
        pass

    assert limits_from_properties(8, 0, Older()).shared_memory_per_block == 166912  # type: ignore[union-attr]
    assert limits_from_properties(3, 5, Older()) is None  # neither the device nor the table says


def test_a_worker_refuses_before_compiling_and_from_compiled_figures() -> None:
    spec = KernelSpec(backend="triton", builtin="gemm_bf16")
    config = {"BLOCK_M": 256, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 6}
    resolved = resolve(spec, config, "triton")
    with pytest.raises(TrialFailure) as refused:
        refuse_unlaunchable(spec, resolved, H200)
    assert refused.value.reason == FailureReason.INFEASIBLE
    assert "Required: 491520, Hardware limit: 232448" in refused.value.message
    refuse_unlaunchable(spec, resolved, None)  # limits unknown: the compiler decides
    unchecked = KernelSpec(backend="triton", builtin="gemm_bf16", options={"resource_model": False})
    refuse_unlaunchable(unchecked, resolve(unchecked, config, "triton"), H200)  # a sweep checking the model
    refuse_unlaunchable(spec, resolve(spec, {**config, "num_stages": 2}, "triton"), H200)  # 163840 bytes: fits

    refuse_compiled(ResourceUse(shared_bytes=100_000, threads=256, registers_per_thread=255), H200, "compiled")
    with pytest.raises(TrialFailure) as over:
        refuse_compiled(ResourceUse(shared_bytes=100_000, threads=512, registers_per_thread=255), H200, "compiled")
    assert over.value.reason == FailureReason.INFEASIBLE
    assert "registers, Required: 130560, Hardware limit: 65536" in over.value.message


def test_the_backends_report_running_out_of_resources_as_infeasible() -> None:
    from workers.backends.cuda_launch import launch_failure_reason
    from workers.backends.triton_kernel import compiled_use, resource_failure

    class OutOfResources(Exception):  # Triton's, by name: triton is not imported here
        pass

    assert resource_failure(OutOfResources("out of resource: shared memory")).reason == FailureReason.INFEASIBLE
    assert resource_failure(RuntimeError("PassManager::run failed")).reason == FailureReason.COMPILE_ERROR
    assert launch_failure_reason(RuntimeError("CUDA_ERROR_OUT_OF_RESOURCES")) == FailureReason.INFEASIBLE
    assert launch_failure_reason(RuntimeError("too many resources requested for launch")) == FailureReason.INFEASIBLE
    assert launch_failure_reason(RuntimeError("CUDA_ERROR_INVALID_VALUE")) == FailureReason.COMPILE_ERROR
    assert launch_failure_reason(RuntimeError("illegal memory access")) == FailureReason.CRASH

    class Metadata:
        shared, num_warps = 491520, 8

    class Compiled:
        metadata, n_regs = Metadata(), 128

    assert compiled_use(Compiled()) == ResourceUse(shared_bytes=491520, threads=256, registers_per_thread=128)


def test_a_worker_reports_its_gpu_limits_in_its_fingerprint() -> None:
    from workers.fingerprint import collect

    probes = {"cpu": {"available": True}, "triton": {"available": True, "device_limits": H200.model_dump()}}
    assert collect(probes).device_limits == H200
    assert collect({"cpu": {"available": True}}).device_limits is None


def test_harness_names_from_before_the_catalog_moved_still_resolve() -> None:
    from workers.backends.gpu_loader import harness_module

    assert harness_module("workers.kernels.gpu.rmsnorm") == "wire.kernels.gpu.rmsnorm"
    assert harness_module("wire.kernels.gpu.rmsnorm") == "wire.kernels.gpu.rmsnorm"
    assert harness_module("team_harness") == "team_harness"
