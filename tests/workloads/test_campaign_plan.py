"""A campaign's studies from a preset's layer and a traffic mix, and the layer's figure, against
hand-computed values."""

from __future__ import annotations

import pytest

from service.workloads.batching import Serving
from service.workloads.campaign import CampaignDocument, layer_figure, plan
from service.workloads.mix import TraceInfo, TrafficMix
from service.workloads.presets import PresetError
from wire.contract import WorkloadShape


def traffic(**fields: object) -> TrafficMix:
    return TrafficMix.model_validate({
        "trace": TraceInfo(file="t", format="azure", sha256="0" * 64, requests=4, skipped=0), "serving": Serving(),
        "steps": 4, "duration_s": 1.0, "tokens_per_step": 5.0, "peak_waiting": 0, "dim": "m", "buckets": [2, 8],
        "workload": [WorkloadShape(dims={"m": 2}, weight=0.5), WorkloadShape(dims={"m": 8}, weight=0.5)],
        "decode_batch": [], "prefill_tokens": [], "tokens": [], **fields})


MIX = traffic(attention=[WorkloadShape(dims={"seq": 512}, weight=0.75), WorkloadShape(dims={"seq": 4096}, weight=0.25)],
              prompt_token_share=0.4)


def campaign(**kernels: dict) -> CampaignDocument:
    return CampaignDocument.model_validate({
        "name": "c", "model": "mixtral-8x7b", "tp": 2, "defaults": {"objectives": ["time_per_token_us"],
                                                                     "budget": {"max_trials": 5}},
        "kernels": kernels})


def test_each_kernel_gets_the_layers_shapes_and_its_token_dim() -> None:
    planned = plan(campaign(rmsnorm={"study": {"kernel": {"backend": "cpu", "builtin": "matmul"},
                                               "budget": {"max_trials": 9}}},
                            fused_moe={"per_bucket": True, "study": {"kernel": {"backend": "cpu"}}}), MIX)
    rms, moe2, moe8 = planned
    assert rms.document["kernel"]["workload"] == [{"dims": {"rows": 2, "cols": 4096}, "weight": 0.5},
                                                  {"dims": {"rows": 8, "cols": 4096}, "weight": 0.5}]
    assert rms.document["kernel"]["options"] == {"token_dim": "rows"}
    assert rms.document["budget"] == {"max_trials": 9} and rms.document["objectives"] == ["time_per_token_us"]
    assert (moe2.bucket, moe2.weight, moe8.bucket) == (2, 0.5, 8)
    assert moe8.document["kernel"]["workload"] == [{"dims": {"m": 8, "e": 8, "n": 7168, "k": 4096, "topk": 2},
                                                    "weight": 1.0}]
    assert moe8.document["name"] == "c: fused_moe at m = 8" and moe8.document["kernel"]["options"]["token_dim"] == "m"


def test_the_layer_figure_by_hand() -> None:
    planned = plan(campaign(rmsnorm={"study": {}}, fused_moe={"per_bucket": True, "study": {}}), MIX)
    # RMSNorm twice; the MoE's buckets weighted by steps x tokens: (0.5 x 2 x 10 + 0.5 x 8 x 4) / (1 + 4) = 5.2
    figure = layer_figure(list(zip(planned, [3.0, 10.0, 4.0], strict=True)))
    assert figure["time_per_token_us"].value == pytest.approx(2 * 3.0 + 5.2)


def test_attention_takes_the_requests_prompt_lengths_and_counts_as_their_share_of_tokens() -> None:
    attention, rms = plan(campaign(attention={"study": {}}, rmsnorm={"study": {}}), MIX)
    # Mixtral at tp 2: 32 heads and 8 KV heads split in two, head dim 128
    assert attention.document["kernel"]["workload"] == [
        {"dims": {"seq": 512, "batch": 1, "heads": 16, "kv_heads": 4, "head_dim": 128, "causal": 1}, "weight": 0.75},
        {"dims": {"seq": 4096, "batch": 1, "heads": 16, "kv_heads": 4, "head_dim": 128, "causal": 1}, "weight": 0.25}]
    assert attention.document["kernel"]["options"]["token_dim"] == "seq"
    # 6 us per prompt token of attention, prompts 40% of all tokens: 2.4 us per token of the layer's
    figure = layer_figure([(attention, 6.0), (rms, 1.0)])
    assert figure["time_per_token_us"].value == pytest.approx(0.4 * 6.0 + 2 * 1.0)


def test_kernels_the_layer_lacks_or_traffic_cannot_fill_are_refused() -> None:
    with pytest.raises(PresetError, match="down_proj: not kernels of this layer"):
        plan(campaign(down_proj={"study": {}}), MIX)
    with pytest.raises(PresetError, match="attention: this workload file has no prompt lengths"):
        plan(campaign(attention={"study": {}}), traffic())
