"""A campaign: one study per kernel of a model's layer (one per M bucket where a kernel's file
keys configurations by M), each kernel's workload the layer's shapes under a traffic mix, and a
layer-level figure beside the per-kernel fronts.

A campaign document names the model (a preset or a config.json's fields), the tensor-parallel
degree, and for each layer kernel to tune the study to run (its kernel, space, baseline: any
study document, less `kernel.workload`, which the campaign fills). Where no GPU is present the
kernels are cpu stand-ins (the built-in matmul for a GEMM, a `module:` kernel of the shape of the
library the GPU runs), so the same campaign runs end to end on a laptop.

The layer figure: a kernel's time per token is, over its studies, sum_b w_b m_b t_b / sum_b w_b m_b
(t_b a bucket study's time_per_token_us; one study: its own), and the layer's the sum over its
kernels, each as many times as it runs in a layer (service.workloads.objectives.layer_per_token),
for the baselines and for each study's best point. Attention's time is per prompt token (its
workload is the requests' prefill), so it enters the layer's figure times the prompt tokens'
share of all the tokens the traffic's steps process. Pure: the CLI talks to the service.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from service.workloads.mix import TrafficMix
from service.workloads.objectives import Estimate, layer_per_token
from service.workloads.presets import LayerKernel, ModelConfig, PresetError, layer_kernels, preset

PER_TOKEN = "time_per_token_us"


class CampaignKernel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    study: dict[str, Any]  # a study document without kernel.workload
    per_bucket: bool = False  # a study per M bucket: each bucket its own configuration (a vLLM file)


class CampaignDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=150)
    model: str | None = None  # a preset's name or Hugging Face id
    config: dict[str, Any] | None = None  # or a config.json's fields
    tp: PositiveInt = 1
    defaults: dict[str, Any] = Field(default_factory=dict)  # under every study: objectives, budget, measure, pool
    kernels: dict[str, CampaignKernel] = Field(min_length=1)

    @model_validator(mode="after")
    def _model(self) -> CampaignDocument:
        if (self.model is None) == (self.config is None):
            raise ValueError("name the model by preset (model) or by its config.json fields (config), one of them")
        return self

    def layer(self) -> list[LayerKernel]:
        config = preset(self.model).config if self.model else ModelConfig.model_validate(self.config)
        return layer_kernels(config, self.tp)


@dataclass(frozen=True)
class PlannedStudy:
    kernel: LayerKernel
    bucket: int | None  # the M of a per-bucket study
    weight: float  # the bucket's share of steps (1 for a whole-mix study)
    document: dict[str, Any]
    token_share: float = 1.0  # the share of the layer's tokens its kernel's time per token counts


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, Mapping) and isinstance(
            merged.get(key), Mapping) else copy.deepcopy(value)
    return merged


def plan(campaign: CampaignDocument, traffic: TrafficMix) -> list[PlannedStudy]:
    """The campaign's studies under a traffic mix."""
    layer = {k.name: k for k in campaign.layer()}
    unknown = sorted(campaign.kernels.keys() - layer.keys())
    if unknown:
        raise PresetError(f"kernels {', '.join(unknown)}: not kernels of this layer ({', '.join(layer)})")
    planned = []
    for name, wanted in campaign.kernels.items():
        kernel = layer[name]
        workload = kernel.under(traffic)
        share = traffic.prompt_token_share if kernel.kind == "attention" else 1.0
        document = _merged(campaign.defaults, wanted.study)
        document.setdefault("kernel", {}).setdefault("options", {})["token_dim"] = kernel.token_dim
        groups = ([(shape.dims[str(kernel.token_dim)], shape.weight, [shape.model_copy(update={"weight": 1.0})])
                   for shape in workload] if wanted.per_bucket else [(None, 1.0, workload)])
        for bucket, weight, shapes in groups:
            study = copy.deepcopy(document)
            study["kernel"]["workload"] = [s.model_dump() for s in shapes]
            study["name"] = f"{campaign.name}: {name}" + (f" at {kernel.token_dim} = {bucket}" if bucket else "")
            planned.append(PlannedStudy(kernel, bucket, weight, study, share))
    return planned


def kernel_per_token(studies: Sequence[tuple[PlannedStudy, float]]) -> Estimate:
    """A kernel's time per token from its studies' (planned study, time_per_token_us)."""
    share = studies[0][0].token_share
    if len(studies) == 1 and studies[0][0].bucket is None:
        return Estimate(share * studies[0][1])
    tokens = [(p.weight * (p.bucket or 1), value) for p, value in studies]
    total = sum(t for t, _ in tokens)
    return Estimate(share * sum(t * value for t, value in tokens) / total)


def layer_figure(results: Sequence[tuple[PlannedStudy, float]]) -> dict[str, Estimate]:
    """The layer's time per token (the kernels studied, each as often as it runs in a layer)."""
    by_kernel: dict[str, list[tuple[PlannedStudy, float]]] = {}
    for planned, value in results:
        by_kernel.setdefault(planned.kernel.name, []).append((planned, value))
    return layer_per_token((studies[0][0].kernel.calls, {PER_TOKEN: kernel_per_token(studies)})
                           for studies in by_kernel.values())
