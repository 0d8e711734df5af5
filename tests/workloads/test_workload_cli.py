"""The command line from a trace to a vLLM file: `paretune workload import`, `workload preset`,
`artifact export vllm-moe` and `artifact export check` (docs/workloads.md's worked example)."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner
from workload_factory import SMALL_TRACE, moe_config, signed_artifact, write_trace

from service.cli import app
from service.workloads.mix import TrafficMix

runner = CliRunner()
SMALL_SERVER = ["--max-num-seqs", "2", "--max-num-batched-tokens", "8", "--step-ms", "1000", "--step-us-per-token", "0",
                "--buckets", "1,2,4,8"]


def test_import_prints_the_histogram_and_json(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, "azure", SMALL_TRACE)
    shown = runner.invoke(app, ["workload", "import", str(trace), "--format", "azure", *SMALL_SERVER])
    assert shown.exit_code == 0, shown.output
    assert "trace trace.csv (azure): 3 requests" in shown.output
    assert "simulated 4.0 s: 4 forward steps, 4.0 tokens per step on average, longest queue 2" in shown.output
    assert "       2          2  0.5000 ########################################\n" in shown.output
    assert "       8          1  0.2500 ####################\n" in shown.output
    assert "prompt tokens per request (seq): attention's workload; prompts are 81.2% of all tokens" in shown.output
    assert "  bucket   requests   share\n     128          3  1.0000" in shown.output  # prompts of 5, 6 and 2

    as_json = runner.invoke(app, ["workload", "import", str(trace), "--format", "azure", *SMALL_SERVER, "--json"])
    mix = TrafficMix.model_validate_json(as_json.output)
    assert [(s.dims, s.weight) for s in mix.workload] == [({"m": 2}, 0.5), ({"m": 4}, 0.25), ({"m": 8}, 0.25)]
    assert mix.trace.requests == 3 and mix.serving.max_num_seqs == 2


def test_import_errors_exit_1_naming_line_and_field(tmp_path: Path) -> None:
    trace = tmp_path / "code.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97996,4808,10\n"
                     "2023-11-16 18:17:04.03196,abc,8\n")
    failed = runner.invoke(app, ["workload", "import", str(trace), "--format", "azure"])
    assert failed.exit_code == 1
    assert f'error: {trace}: line 3: ContextTokens: "abc" is not an integer' in failed.output
    bad_buckets = runner.invoke(app, ["workload", "import", str(trace), "--format", "azure", "--buckets", "0,a"])
    assert bad_buckets.exit_code == 1 and "write positive integers separated by commas" in bad_buckets.output


def test_from_a_trace_to_a_vllm_file(tmp_path: Path, signing_key: Ed25519PrivateKey, public_pem: str) -> None:
    trace = write_trace(tmp_path, "mooncake", SMALL_TRACE)
    imported = runner.invoke(app, ["workload", "import", str(trace), "--format", "mooncake", *SMALL_SERVER, "--json"])
    (tmp_path / "mix.json").write_text(imported.output)

    layer = runner.invoke(app, ["workload", "preset", "mixtral-8x7b", "--tp", "2", "--workload",
                                str(tmp_path / "mix.json"), "--json"])
    moe = next(k for k in json.loads(layer.output)["kernels"] if k["kind"] == "fused_moe")
    assert moe["vllm"] == {"E": 8, "N": 7168}
    assert moe["workload"] == [{"dims": {"m": m, "e": 8, "n": 7168, "k": 4096, "topk": 2}, "weight": w}
                               for m, w in ((2, 0.5), (4, 0.25), (8, 0.25))]
    attention = next(k for k in json.loads(layer.output)["kernels"] if k["kind"] == "attention")
    assert attention["token_dim"] == "seq" and attention["workload"] == [
        {"dims": {"seq": 128, "batch": 1, "heads": 16, "kv_heads": 4, "head_dim": 128, "causal": 1}, "weight": 1.0}]

    # one study per bucket, each approved: the artifacts measured at those shapes
    files = []
    for shape, block in zip(moe["workload"], (16, 16, 32), strict=True):
        dims = {k: v for k, v in shape["dims"].items() if k != "m"}
        files.append(tmp_path / f"fused_moe_m{shape['dims']['m']}.json")
        files[-1].write_bytes(signed_artifact(signing_key, moe_config(block), [shape["dims"]["m"]], dims=dims))
    (tmp_path / "key.pem").write_text(public_pem)
    key = ["--public-key", str(tmp_path / "key.pem")]

    out = tmp_path / "vllm-configs"
    exported = runner.invoke(app, ["artifact", "export", "vllm-moe", *map(str, files), "--preset", "mixtral-8x7b",
                                   "--tp", "2", "--workload", str(tmp_path / "mix.json"), "-o", str(out), *key])
    assert exported.exit_code == 0, exported.output
    vllm_file = out / "E=8,N=7168,device_name=NVIDIA_H200.json"
    configs = json.loads(vllm_file.read_text())
    assert sorted(configs) == ["2", "4", "8", "triton_version"]
    assert configs["8"]["BLOCK_SIZE_M"] == 32 and configs["2"]["BLOCK_SIZE_M"] == 16
    record = json.loads((out / (vllm_file.name + ".paretune.json")).read_text())
    assert record["buckets"] == {str(m): json.loads(f.read_bytes())["sha256"] for m, f in zip((2, 4, 8), files,
                                                                                                strict=True)}

    checked = runner.invoke(app, ["artifact", "export", "check", str(vllm_file), *map(str, files), *key])
    assert checked.exit_code == 0 and checked.output.startswith(f"OK {vllm_file}"), checked.output
    vllm_file.write_text(vllm_file.read_text().replace('"num_stages": 3', '"num_stages": 4', 1))
    tampered = runner.invoke(app, ["artifact", "export", "check", str(vllm_file), *map(str, files), *key])
    assert tampered.exit_code == 2 and "changed after it was exported" in tampered.output

    missing = runner.invoke(app, ["artifact", "export", "vllm-moe", *map(str, files[:2]), "-E", "8", "-N", "7168",
                                  "--workload", str(tmp_path / "mix.json"), "-o", str(out), *key])
    assert missing.exit_code == 1 and "no artifact was measured at m = 8" in missing.output

    module = tmp_path / "moe_configs.py"
    written = runner.invoke(app, ["artifact", "export", "triton", *map(str, files), "-o", str(module), *key])
    assert written.exit_code == 0 and "CONFIGS = [" in module.read_text()
    assert runner.invoke(app, ["artifact", "export", "check", str(module), *map(str, files), *key]).exit_code == 0
