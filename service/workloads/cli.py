"""`paretune workload import|preset`: from a serving trace and a model to a study's workload.

Runs offline on a worker-only install (pydantic and typer only): no service, no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from service.workloads.batching import Serving, SimulationError, simulate
from service.workloads.mix import (
    SEQ_BUCKETS,
    VLLM_BATCH_SIZES,
    Bin,
    RequestBin,
    TraceInfo,
    TrafficMix,
    parse_buckets,
    sha256_of,
    traffic_mix,
)
from service.workloads.presets import LayerKernel, ModelConfig, PresetError, layer_kernels, preset, presets
from service.workloads.traces import TraceError, TraceFormat, read_trace

workload_app = typer.Typer(help="Traffic and models to a study's workload: trace import, model presets.",
                           no_args_is_help=True)
DEFAULT = Serving()
BAR = 40  # characters of the longest histogram bar


def _fail(message: str) -> Any:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@workload_app.command("import")
def import_trace(
    file: Annotated[Path, typer.Argument(help="the trace file", exists=True, dir_okay=False)],
    trace_format: Annotated[TraceFormat, typer.Option("--format", help="azure (CSV), mooncake (JSONL), burstgpt")],
    max_num_seqs: Annotated[int, typer.Option(min=1, help="requests running at once")] = DEFAULT.max_num_seqs,
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, help="tokens of one forward step")] = (
        DEFAULT.max_num_batched_tokens),
    chunked_prefill: Annotated[bool, typer.Option("--chunked-prefill/--no-chunked-prefill")] = DEFAULT.chunked_prefill,
    step_ms: Annotated[float, typer.Option(min=0, help="a step's fixed time (cost model)")] = DEFAULT.step_ms,
    step_us_per_token: Annotated[float, typer.Option(min=0, help="a step's time per token (cost model)")] = (
        DEFAULT.step_us_per_token),
    time_scale: Annotated[float, typer.Option(help="multiply arrival times (2: half the request rate)")] = 1.0,
    buckets: Annotated[str, typer.Option(help="the M buckets, comma separated (default: vLLM's tuned batch sizes)")] = (
        ",".join(map(str, VLLM_BATCH_SIZES))),
    dim: Annotated[str, typer.Option(help="the workload dim that holds a step's tokens")] = "m",
    seq_buckets: Annotated[str, typer.Option(help="attention's sequence buckets for the requests' prompts, comma "
                                             "separated")] = ",".join(map(str, SEQ_BUCKETS)),
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (its `workload` is a study's)")] = False,
) -> None:
    """Simulate continuous batching over a serving trace (streamed) and print the distribution of
    a forward step's tokens: the M buckets and weights of a study's kernel.workload; and of the
    requests' prompt lengths: attention's workload (`attention`, the sequence in dim seq)."""
    try:
        serving = Serving(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          chunked_prefill=chunked_prefill, step_ms=step_ms, step_us_per_token=step_us_per_token,
                          time_scale=time_scale)
        grid, seq_grid = parse_buckets(buckets), parse_buckets(seq_buckets)
        simulation = simulate(read_trace(file, trace_format), serving)
    except (TraceError, SimulationError, ValueError) as exc:
        _fail(f"{file}: {exc}" if isinstance(exc, TraceError | SimulationError) else str(exc))
    if not simulation.steps:
        _fail(f"{file}: no request with prompt tokens")
    trace = TraceInfo(file=file.name, format=trace_format, sha256=sha256_of(file), requests=simulation.requests,
                      skipped=simulation.skipped)
    mix = traffic_mix(simulation, trace, serving, grid, dim, seq_grid)
    typer.echo(mix.model_dump_json(indent=2) if as_json else _report(mix))


def _report(mix: TrafficMix) -> str:
    s, t = mix.serving, mix.trace
    lines = [
        f"trace {t.file} ({t.format}): {t.requests} requests"
        + (f", {t.skipped} without prompt tokens skipped" if t.skipped else "") + f"; sha256 {t.sha256[:16]}",
        f"serving: max_num_seqs {s.max_num_seqs}, max_num_batched_tokens {s.max_num_batched_tokens}, chunked "
        f"prefill {'on' if s.chunked_prefill else 'off'}; a step takes {s.step_ms:g} ms + {s.step_us_per_token:g} "
        f"us per token" + (f"; arrivals x{s.time_scale:g}" if s.time_scale != 1 else ""),
        f"simulated {mix.duration_s:.1f} s: {mix.steps} forward steps, {mix.tokens_per_step:.1f} tokens per step on "
        f"average, longest queue {mix.peak_waiting}",
        "",
        *_histogram(f"tokens per step ({mix.dim}): the workload", mix.tokens),
        *_histogram("requests decoding per step", mix.decode_batch),
        *_histogram("prompt tokens per step", mix.prefill_tokens),
        *_histogram(f"prompt tokens per request (seq): attention's workload; prompts are {mix.prompt_token_share:.1%} "
                    "of all tokens", mix.prompts),
    ]
    return "\n".join(lines)


def _histogram(title: str, bins: list[Bin] | list[RequestBin]) -> list[str]:
    unit = "requests" if bins and isinstance(bins[0], RequestBin) else "steps"
    counts = [(b.bucket, b.requests if isinstance(b, RequestBin) else b.steps) for b in bins]
    total = sum(n for _, n in counts) or 1
    most = max((n for _, n in counts), default=1)
    rows = [f"{title}", f"{'bucket':>8} {unit:>10} {'share':>7}"]
    for bucket, n in counts:
        bar = "#" * max(1, round(BAR * n / most))
        rows.append(f"{bucket:>8} {n:>10} {n / total:>7.4f} {bar}")
    return [*rows, ""] if bins else [title, "  (none)", ""]


@workload_app.command("preset")
def show_preset(
    name: Annotated[str | None, typer.Argument(help="a preset's name or Hugging Face id (--list shows them)")] = None,
    config: Annotated[Path | None, typer.Option(help="a model's config.json instead of a preset", exists=True,
                                                 dir_okay=False)] = None,
    tp: Annotated[int, typer.Option(min=1, help="tensor-parallel degree")] = 1,
    workload: Annotated[Path | None, typer.Option(help="a `workload import --json` result: each kernel's workload "
                                                  "under that traffic", exists=True, dir_okay=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
    list_presets: Annotated[bool, typer.Option("--list", help="list the presets")] = False,
) -> None:
    """The kernels and shapes of one layer of a model on each GPU, from a preset or a config.json."""
    if list_presets:
        for known in presets().values():
            typer.echo(f"{known.name:<16} {known.hf_id:<32} {known.source}")
        return
    try:
        model = _model(name, config)
        kernels = layer_kernels(model, tp)
        mix = TrafficMix.model_validate_json(workload.read_text()) if workload else None
    except (PresetError, ValueError) as exc:
        _fail(str(exc))
    body = {"model": name or str(config), "tp": tp, "config": model.model_dump(exclude_none=True),
            "kernels": [_kernel(k, mix) for k in kernels]}
    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    typer.echo(f"{body['model']} at tensor-parallel {tp}: one layer per GPU")
    for k in kernels:
        dims = " ".join(f"{key}={value}" for key, value in k.dims.items())
        token = f", tokens in {k.token_dim}" if k.token_dim else ""
        typer.echo(f"  {k.name:<28} {k.kind:<10} {dims:<36} x{k.calls} ({k.dtype or 'dtype unknown'}{token})")


def _model(name: str | None, config: Path | None) -> ModelConfig:
    if (name is None) == (config is None):
        raise PresetError("name a preset or pass --config config.json (not both)")
    if config is not None:
        return ModelConfig.model_validate(json.loads(config.read_text()))
    return preset(str(name)).config


def _kernel(kernel: LayerKernel, mix: TrafficMix | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": kernel.name, "kind": kernel.kind, "dims": kernel.dims,
                            "token_dim": kernel.token_dim, "dtype": kernel.dtype, "calls": kernel.calls}
    if kernel.vllm:
        body["vllm"] = kernel.vllm
    if mix is not None:
        body["workload"] = [s.model_dump() for s in kernel.under(mix)]
    return body


@workload_app.command("campaign")
def run_campaign(
    file: Annotated[Path, typer.Argument(help="the campaign document (YAML or JSON)", exists=True, dir_okay=False)],
    workload: Annotated[Path, typer.Option(help="the traffic: a `workload import --json` result", exists=True,
                                           dir_okay=False)],
    server: Annotated[str, typer.Option(envvar="PARETUNE_SERVER", help="control plane URL")] = "http://127.0.0.1:8000",
    token: Annotated[str, typer.Option(envvar="PARETUNE_TOKEN", help="API token")] = "",
    timeout: Annotated[float, typer.Option(help="seconds to wait for the studies")] = 3600.0,
    plan_only: Annotated[bool, typer.Option("--plan", help="print the study documents, create nothing")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """A study per kernel of a model's layer (per M bucket where asked) under a traffic mix; waits
    for them and prints each kernel's front and the layer's time per token, baseline and tuned."""
    from service import safe_yaml
    from service.workloads.campaign import CampaignDocument, plan

    try:
        raw = safe_yaml.load(file.read_text(), max_bytes=1 << 22, max_depth=32, max_aliases=64)
        campaign = CampaignDocument.model_validate(raw)
        mix = TrafficMix.model_validate_json(workload.read_text())
        planned = plan(campaign, mix)
    except (PresetError, ValueError, safe_yaml.DocumentRefused, yaml.YAMLError) as exc:
        _fail(f"{file}: {exc}")
    if plan_only:
        typer.echo(json.dumps([p.document for p in planned], indent=2))
        return
    from service.workloads.campaign_client import run

    outcome = run(planned, server, token, timeout)
    typer.echo(json.dumps(outcome, indent=2) if as_json else _campaign_report(outcome))


def _campaign_report(outcome: dict[str, Any]) -> str:
    lines = [f"{'study':>6}  {'kernel':<34} {'state':<10} {'front':>5} {'baseline us/token':>18} "
             f"{'best us/token':>14} {'ratio':>6}"]
    for s in outcome["studies"]:
        best, base = s.get("best_per_token_us"), s.get("baseline_per_token_us")
        ratio = f"{best / base:6.3f}" if best and base else "     -"
        lines.append(f"{s['id']:>6}  {s['name'][-34:]:<34} {s['state']:<10} {s['front']:>5} "
                     f"{base or 0:>18.4f} {best or 0:>14.4f} {ratio}")
    layer = outcome.get("layer") or {}
    if layer:
        lines += ["", f"layer ({', '.join(layer['kernels'])}), time per token: baseline {layer['baseline_us']:.4f} us, "
                      f"tuned {layer['tuned_us']:.4f} us ({layer['tuned_us'] / layer['baseline_us']:.3f}x)"]
    return "\n".join(lines)
