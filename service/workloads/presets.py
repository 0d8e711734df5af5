"""Model presets: the kernels and shapes of one transformer layer, from a model's Hugging Face
`config.json` fields and a tensor-parallel degree.

The shapes are per GPU, split the way vLLM's parallel layers split them:
- QKV: a column-parallel GEMM, K = hidden, N = (heads / tp + 2 * kv heads per rank) * head_dim.
  KV heads split across ranks when there are at least tp of them, else each rank keeps one
  (vLLM's QKVParallelLinear replicates them);
- O: row-parallel, K = heads / tp * head_dim, N = hidden;
- gate/up (merged): column-parallel, K = hidden, N = 2 * intermediate / tp;
- down: row-parallel, K = intermediate / tp, N = hidden;
- attention: heads / tp, kv heads per rank, head_dim; one request's causal prefill attention
  (batch 1) over its prompt, the sequence `seq`;
- RMSNorm over hidden, twice per layer (before attention and before the MLP);
- MoE layers replace gate/up and down by the router (a replicated GEMM, N = experts) and the
  fused MoE kernel: E experts, N = expert intermediate / tp (the `N` of vLLM's tuned-config
  file names), K = hidden, top-k; a shared expert, where the model has one, is a dense MLP.

Every GEMM's M, RMSNorm's rows and the MoE's M are the tokens of a forward step, and
attention's seq a request's prompt: the traffic fills them (service.workloads.batching), one
layer here fixes the rest.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PositiveInt, model_validator

from wire.contract import WorkloadShape

if TYPE_CHECKING:
    from service.workloads.mix import TrafficMix

Kind = Literal["gemm", "attention", "rmsnorm", "fused_moe"]


class PresetError(ValueError):
    """A model or tensor-parallel degree that does not give a layer; the message says why."""


class ModelConfig(BaseModel):
    """The fields of a Hugging Face config.json that decide a layer's shapes (others ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    hidden_size: PositiveInt
    intermediate_size: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = None
    shared_expert_intermediate_size: int | None = Field(default=None, ge=0)
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None = None  # absent: one per attention head, as transformers reads it
    head_dim: PositiveInt | None = None  # absent: hidden_size / num_attention_heads
    num_experts: int | None = Field(default=None, ge=0,
                                    validation_alias=AliasChoices("num_experts", "num_local_experts"))
    num_experts_per_tok: PositiveInt | None = None
    torch_dtype: str | None = Field(default=None, validation_alias=AliasChoices("torch_dtype", "dtype"))
    num_hidden_layers: PositiveInt | None = None

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def expert_intermediate(self) -> int:
        """An expert's intermediate size: moe_intermediate_size (Qwen, DeepSeek), else
        intermediate_size (Mixtral), as vLLM's MoE tuning reads it."""
        return self.moe_intermediate_size or self.intermediate_size or 0

    @model_validator(mode="after")
    def _complete(self) -> ModelConfig:
        if self.is_moe and not (self.num_experts_per_tok and self.expert_intermediate):
            raise ValueError("a MoE model needs num_experts_per_tok and moe_intermediate_size (or intermediate_size)")
        if not self.is_moe and not self.intermediate_size:
            raise ValueError("a dense model needs intermediate_size")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size is not a multiple of num_attention_heads: give head_dim")
        return self


@dataclass(frozen=True)
class LayerKernel:
    """One kernel of a layer: its fixed dims per GPU and which dim the traffic's tokens fill."""

    name: str
    kind: Kind
    dims: dict[str, int]
    token_dim: str  # m (GEMM, MoE), rows (RMSNorm), seq (attention: a request's prompt)
    dtype: str | None = None
    calls: int = 1  # launches per layer in one forward step
    vllm: dict[str, int] = field(default_factory=dict)  # names vLLM gives (fused MoE: E, N)

    def workload(self, mix: Sequence[WorkloadShape], dim: str = "m") -> list[WorkloadShape]:
        """This kernel's shapes under a traffic mix (for attention, the mix of prompt
        lengths): the mix's `dim` in token_dim, the layer's dims beside it, the mix's weights."""
        return [WorkloadShape(dims={self.token_dim: shape.dims[dim], **self.dims}, weight=shape.weight)
                for shape in mix]

    def under(self, traffic: TrafficMix) -> list[WorkloadShape]:
        """This kernel's shapes under a `workload import` result: the steps' tokens, or for
        attention the requests' prompts; a PresetError naming the kernel where it lacks them."""
        try:
            shapes, dim = traffic.shapes_for(self.kind)
        except ValueError as exc:
            raise PresetError(f"{self.name}: {exc}") from None
        return self.workload(shapes, dim)


def _split(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise PresetError(f"{what} {value} is not divisible by the tensor-parallel degree {tp}")
    return value // tp


def _kv_heads_per_rank(kv: int, tp: int) -> int:
    if kv >= tp:
        return _split(kv, tp, "num_key_value_heads")
    if tp % kv:
        raise PresetError(f"the tensor-parallel degree {tp} is not a multiple of num_key_value_heads {kv}")
    return 1


def _gemm(name: str, n: int, k: int, dtype: str | None) -> LayerKernel:
    return LayerKernel(name, "gemm", {"n": n, "k": k}, token_dim="m", dtype=dtype)


def layer_kernels(model: ModelConfig, tp: int = 1) -> list[LayerKernel]:
    """The kernels of one layer of `model` on each of `tp` GPUs (tensor parallel)."""
    if tp < 1:
        raise PresetError(f"the tensor-parallel degree must be at least 1, not {tp}")
    hidden, head, dtype = model.hidden_size, model.head_size, model.torch_dtype
    heads = _split(model.num_attention_heads, tp, "num_attention_heads")
    kv = _kv_heads_per_rank(model.kv_heads, tp)
    kernels = [
        LayerKernel("rmsnorm", "rmsnorm", {"cols": hidden}, token_dim="rows", dtype=dtype, calls=2),
        _gemm("qkv_proj", (heads + 2 * kv) * head, hidden, dtype),
        LayerKernel("attention", "attention", {"batch": 1, "heads": heads, "kv_heads": kv, "head_dim": head,
                                               "causal": 1}, token_dim="seq", dtype=dtype),
        _gemm("o_proj", hidden, heads * head, dtype),
    ]
    if not model.is_moe:
        inter = _split(model.intermediate_size or 0, tp, "intermediate_size")
        return [*kernels, _gemm("gate_up_proj", 2 * inter, hidden, dtype), _gemm("down_proj", hidden, inter, dtype)]
    experts, top_k = model.num_experts or 0, model.num_experts_per_tok or 0
    expert_n = _split(model.expert_intermediate, tp, "the expert intermediate size")
    kernels += [
        _gemm("router", experts, hidden, dtype),
        LayerKernel("fused_moe", "fused_moe", {"e": experts, "n": expert_n, "k": hidden, "topk": top_k},
                    token_dim="m", dtype=dtype, vllm={"E": experts, "N": expert_n}),
    ]
    if model.shared_expert_intermediate_size:
        shared = _split(model.shared_expert_intermediate_size, tp, "shared_expert_intermediate_size")
        kernels += [_gemm("shared_expert_gate_up_proj", 2 * shared, hidden, dtype),
                    _gemm("shared_expert_down_proj", hidden, shared, dtype)]
    return kernels


@dataclass(frozen=True)
class Preset:
    name: str
    hf_id: str
    source: str  # the published config.json the numbers come from
    config: ModelConfig


@functools.cache
def presets() -> dict[str, Preset]:
    """The presets shipped with paretune (service/workloads/presets.json)."""
    data = json.loads(resources.files("service.workloads").joinpath("presets.json").read_text())
    return {name: Preset(name, entry["hf_id"], entry["source"], ModelConfig.model_validate(entry["config"]))
            for name, entry in data["models"].items()}


def preset(name: str) -> Preset:
    known = presets()
    if name in known:
        return known[name]
    by_id = {p.hf_id.lower(): p for p in known.values()}
    if name.lower() in by_id:
        return by_id[name.lower()]
    raise PresetError(f"no preset {name!r}: one of {', '.join(known)} (or pass a config.json)")
