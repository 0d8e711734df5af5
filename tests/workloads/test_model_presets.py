"""Model presets give the shapes vLLM's own tables and tuned-config files name."""

from __future__ import annotations

import json

import pytest

from service.artifacts.exports import vllm_moe_file_name
from service.workloads.presets import LayerKernel, ModelConfig, PresetError, layer_kernels, preset, presets
from wire.contract import WorkloadShape

# vLLM's benchmarks/kernels/weight_shapes.py (vllm-project/vllm, main, read 2026): ([K, N], TP split dim)
# in the order QKV, O, gate/up, down; TP splits N of a dim-1 entry and K of a dim-0 entry.
VLLM_WEIGHT_SHAPES = {
    "meta-llama/Llama-3-8b": [([4096, 6144], 1), ([4096, 4096], 0), ([4096, 28672], 1), ([14336, 4096], 0)],
    "mistralai/Mistral-7B-v0.1": [([4096, 6144], 1), ([4096, 4096], 0), ([4096, 28672], 1), ([14336, 4096], 0)],
    "meta-llama/Llama-2-7b-hf": [([4096, 12288], 1), ([4096, 4096], 0), ([4096, 22016], 1), ([11008, 4096], 0)],
    "Qwen/Qwen2.5-7B-Instruct": [([3584, 4608], 1), ([3584, 3584], 0), ([3584, 37888], 1), ([18944, 3584], 0)],
    # Llama-3.3-70B-Instruct's config has Llama-3-70B's hidden, intermediate, head and kv-head sizes
    "meta-llama/Llama-3.3-70B-Instruct": [([8192, 10240], 1), ([8192, 8192], 0), ([8192, 57344], 1),
                                          ([28672, 8192], 0)],
}
PRESET_OF = {
    "meta-llama/Llama-3-8b": "llama-3-8b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3-70b",
}
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def gemm_shapes(name: str, tp: int) -> list[tuple[int, int]]:
    by_name = {k.name: k for k in layer_kernels(preset(name).config, tp)}
    return [(by_name[g].dims["k"], by_name[g].dims["n"]) for g in GEMMS]


@pytest.mark.parametrize("model", VLLM_WEIGHT_SHAPES)
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gemm_shapes_are_vllms(model: str, tp: int) -> None:
    expected = [(k // tp, n) if split == 0 else (k, n // tp) for (k, n), split in VLLM_WEIGHT_SHAPES[model]]
    assert gemm_shapes(PRESET_OF[model], tp) == expected


def test_tp8_where_vllm_allows_it_and_a_clear_refusal_where_it_does_not() -> None:
    shapes = VLLM_WEIGHT_SHAPES["meta-llama/Llama-3-8b"]
    expected = [(k // 8, n) if split == 0 else (k, n // 8) for (k, n), split in shapes]
    assert gemm_shapes("llama-3-8b", 8) == expected
    with pytest.raises(PresetError, match="num_attention_heads 28 is not divisible by the tensor-parallel degree 8"):
        layer_kernels(preset("qwen2.5-7b").config, 8)


def test_kv_heads_are_replicated_past_their_count() -> None:
    # 8 KV heads on 16 GPUs: each keeps one (vLLM's QKVParallelLinear), so N = (32/16 + 2) * 128
    kernels = {k.name: k for k in layer_kernels(preset("llama-3-8b").config, 16)}
    assert kernels["qkv_proj"].dims == {"n": 512, "k": 4096}
    assert kernels["attention"].dims == {"batch": 1, "heads": 2, "kv_heads": 1, "head_dim": 128, "causal": 1}
    with pytest.raises(PresetError, match="not a multiple of num_key_value_heads 8"):
        layer_kernels(ModelConfig(hidden_size=6144, intermediate_size=12288, num_attention_heads=48,
                                  num_key_value_heads=8), 12)


def test_the_rest_of_a_dense_layer() -> None:
    kernels = {k.name: k for k in layer_kernels(preset("llama-3-8b").config, 2)}
    assert set(kernels) == {"rmsnorm", "qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj"}
    assert kernels["rmsnorm"] == LayerKernel("rmsnorm", "rmsnorm", {"cols": 4096}, token_dim="rows", dtype="bfloat16",
                                             calls=2)
    assert kernels["attention"].dims == {"batch": 1, "heads": 16, "kv_heads": 4, "head_dim": 128, "causal": 1}
    assert kernels["attention"].token_dim == "seq"


# vLLM v0.34.0 ships tuned fused-MoE files with these names (vllm/model_executor/layers/fused_moe/configs/)
VLLM_MOE_FILES = {
    ("mixtral-8x7b", 1): "E=8,N=14336,device_name=NVIDIA_H200.json",
    ("mixtral-8x7b", 2): "E=8,N=7168,device_name=NVIDIA_H200.json",
    ("mixtral-8x7b", 4): "E=8,N=3584,device_name=NVIDIA_H200.json",
    ("mixtral-8x7b", 8): "E=8,N=1792,device_name=NVIDIA_H200.json",
    ("qwen2-57b-a14b", 1): "E=64,N=2560,device_name=NVIDIA_H200.json",
    ("qwen2-57b-a14b", 2): "E=64,N=1280,device_name=NVIDIA_H200.json",
    ("qwen2-57b-a14b", 4): "E=64,N=640,device_name=NVIDIA_H200.json",
}


@pytest.mark.parametrize(("model", "tp"), VLLM_MOE_FILES)
def test_moe_layers_name_the_files_vllm_ships(model: str, tp: int) -> None:
    moe = next(k for k in layer_kernels(preset(model).config, tp) if k.kind == "fused_moe")
    assert vllm_moe_file_name(moe.vllm["E"], moe.vllm["N"], "NVIDIA_H200") == VLLM_MOE_FILES[model, tp]


def test_a_moe_layer() -> None:
    kernels = {k.name: k for k in layer_kernels(preset("qwen2-57b-a14b").config, 2)}
    assert "gate_up_proj" not in kernels and "down_proj" not in kernels  # the experts replace the dense MLP
    assert kernels["router"].dims == {"n": 64, "k": 3584}
    assert kernels["fused_moe"].dims == {"e": 64, "n": 1280, "k": 3584, "topk": 8}
    assert kernels["shared_expert_gate_up_proj"].dims == {"n": 20480, "k": 3584}  # 2 * 20480 / 2
    assert kernels["shared_expert_down_proj"].dims == {"n": 3584, "k": 10240}
    assert "shared_expert_gate_up_proj" not in {k.name for k in layer_kernels(preset("mixtral-8x7b").config)}


def test_a_config_json_as_hugging_face_writes_it() -> None:
    text = json.dumps({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                       "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                       "num_experts_per_tok": 2, "dtype": "bfloat16", "rope_theta": 1e6})
    model = ModelConfig.model_validate_json(text)
    assert model == preset("mixtral-8x7b").config.model_copy(update={"num_hidden_layers": None})
    assert model.head_size == 128 and model.kv_heads == 8 and model.torch_dtype == "bfloat16"
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        ModelConfig(hidden_size=4096, num_attention_heads=32, num_experts=8)
    with pytest.raises(ValueError, match="dense model needs intermediate_size"):
        ModelConfig(hidden_size=4096, num_attention_heads=32)


def test_presets_by_name_or_hugging_face_id() -> None:
    assert {"llama-3-8b", "llama-3-70b", "mixtral-8x7b", "qwen2-57b-a14b"} <= set(presets())
    assert preset("mistralai/Mixtral-8x7B-v0.1") is preset("mixtral-8x7b")
    with pytest.raises(PresetError, match="no preset 'gpt-5'"):
        preset("gpt-5")


def test_a_kernel_under_a_traffic_mix() -> None:
    mix = [WorkloadShape(dims={"m": 8}, weight=0.75), WorkloadShape(dims={"m": 512}, weight=0.25)]
    kernels = {k.name: k for k in layer_kernels(preset("llama-3-8b").config)}
    assert kernels["down_proj"].workload(mix) == [
        WorkloadShape(dims={"m": 8, "n": 4096, "k": 14336}, weight=0.75),
        WorkloadShape(dims={"m": 512, "n": 4096, "k": 14336}, weight=0.25),
    ]
    assert kernels["rmsnorm"].workload(mix)[1].dims == {"rows": 512, "cols": 4096}
    prompts = [WorkloadShape(dims={"seq": 2048}, weight=1.0)]
    assert kernels["attention"].workload(prompts, "seq") == [WorkloadShape(
        dims={"seq": 2048, "batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": 1}, weight=1.0)]
