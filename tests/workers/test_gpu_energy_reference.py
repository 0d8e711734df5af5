"""Energy and power of a hot window against the steady state, on a simulated power-capped GPU.

The simulated device (workers/measure/nvml_sim.py) has a power controller that holds the
trailing one-second mean at the cap, an energy counter published in ~100 ms ticks, and
calls whose speed follows power. Its steady state comes from the model itself (in closed
form for a card that jumps from idle to busy); the estimators see only counter readings and
replay times, as on a GPU. The first-to-last-tick estimate the harness used before is
biased high under the cap (more for a kernel that would draw far above it, as a memory-bound
small-M GEMM does); spans of whole controller periods agree with the steady state.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workers.measure.gpu_aggregate import ShapeSamples, workload_metrics
from workers.measure.gpu_energy import (
    EnergyWindow,
    Tick,
    energy_window,
    period_spans,
    ticks_from_readings,
    window_calls,
)
from workers.measure.gpu_harness import combine_references, hot_energy, reference_result
from workers.measure.nvml_sampler import NvmlSampler
from workers.measure.nvml_sim import PowerCappedGpu, SimulatedNvml, SimulatedRun, simulate_run

COMPUTE_BOUND = PowerCappedGpu(busy_w=730.0)  # a 4096^3 GEMM: ~730 W at full clock on the H200
MEMORY_BOUND = PowerCappedGpu(busy_w=800.0, busy_rate=40000.0)  # short calls, far above the cap
BELOW_CAP = PowerCappedGpu(busy_w=620.0)


def trial_metrics(run: SimulatedRun) -> tuple[dict, ShapeSamples]:
    """What the harness reports for the simulated hot window: the trial's own code path
    from the sampler's readings and the replays' times on."""
    sample = ShapeSamples("shape", 1.0, hot_ms=run.per_call_ms, hot_mean_ms=run.mean_call_ms)
    hot_energy(sample, run.readings, run.busy_start, run.busy_end, run.replay_ms, run.calls_per_replay)
    return workload_metrics([sample], ["runtime_ms", "energy_mj", "power_w"]), sample


class TestSimulatedDevice:
    def test_steady_state_matches_the_closed_form(self) -> None:
        gpu = PowerCappedGpu(ramp=())
        assert gpu.steady_energy_per_call_mj() == pytest.approx(gpu.closed_form_energy_per_call_mj(), rel=1e-3)

    def test_every_second_after_saturation_averages_the_cap(self) -> None:
        trace = MEMORY_BOUND.trace(load_end=6.0)
        starts = np.arange(1.0, 4.9, 0.037)
        means = [trace.energy_j(s + 1.0) - trace.energy_j(s) for s in starts]
        assert means == pytest.approx([700.0] * len(means), rel=1e-3)
        # ...while it runs above the cap after the idle gap and dips once a second
        assert trace.power_w(0.5) == 800.0
        assert min(trace.power_w(s) for s in np.arange(1.0, 2.0, 0.001)) < 700.0

    def test_below_the_cap_the_card_draws_what_it_wants(self) -> None:
        trace = BELOW_CAP.trace(load_end=4.0)
        assert trace.energy_j(3.5) - trace.energy_j(1.5) == pytest.approx(2 * 620.0, rel=1e-6)


class TestTrialAgainstSteadyState:
    @pytest.mark.parametrize(("gpu", "at_least"), [(COMPUTE_BOUND, 0.01), (MEMORY_BOUND, 0.02)])
    def test_first_to_last_tick_reads_high_under_the_cap(self, gpu: PowerCappedGpu, at_least: float) -> None:
        _, sample = trial_metrics(simulate_run(gpu, window_s=1.6))
        assert sample.edge_power_w is not None
        assert sample.edge_power_w / gpu.steady_power_w() - 1.0 > at_least

    @pytest.mark.parametrize(
        ("gpu", "warmup_s"),
        [
            (COMPUTE_BOUND, 0.15),
            (COMPUTE_BOUND.__class__(busy_w=730.0, tick_phase_s=0.0, lag_s=0.08), 0.1),
            (MEMORY_BOUND, 0.1),
            (PowerCappedGpu(busy_w=800.0, busy_rate=300.0, ramp=((0.1, 450.0), (0.1, 600.0)), tick_phase_s=0.06), 0.3),
            (BELOW_CAP, 0.15),
        ],
    )
    def test_whole_period_spans_agree_within_a_percent(self, gpu: PowerCappedGpu, warmup_s: float) -> None:
        metrics, sample = trial_metrics(simulate_run(gpu, window_s=1.6, warmup_s=warmup_s))
        assert sample.energy is not None and sample.energy.periods == 1
        assert metrics["power_w"].value == pytest.approx(gpu.steady_power_w(), rel=0.01)
        assert metrics["energy_mj"].value == pytest.approx(gpu.steady_energy_per_call_mj(), rel=0.01)
        # the old estimate stays beside it, for comparison
        assert metrics["energy_mj"].stats["edge_mj"] == pytest.approx(sample.edge_energy_mj)

    def test_against_the_closed_form(self) -> None:
        """A card that jumps from idle to busy: the steady state in closed form (power the
        cap, energy per call cap / (t* busy_rate)), not from the model's own trace."""
        gpu = PowerCappedGpu(busy_w=760.0, busy_rate=5000.0, ramp=())
        closed_form_mj = gpu.closed_form_energy_per_call_mj()
        metrics, sample = trial_metrics(simulate_run(gpu, window_s=1.6))
        assert metrics["power_w"].value == pytest.approx(gpu.cap_w, rel=0.01)
        assert metrics["energy_mj"].value == pytest.approx(closed_form_mj, rel=0.01)
        assert sample.edge_power_w is not None and sample.edge_power_w > 1.02 * gpu.cap_w

    def test_power_is_energy_over_the_same_calls_time(self) -> None:
        metrics, sample = trial_metrics(simulate_run(MEMORY_BOUND, window_s=1.6))
        assert sample.energy is not None and sample.energy_calls
        seconds_per_call = sample.energy.seconds / sample.energy_calls
        assert metrics["power_w"].value == pytest.approx(metrics["energy_mj"].value / 1000.0 / seconds_per_call)

    def test_a_window_shorter_than_a_period_falls_back_and_says_so(self) -> None:
        _, sample = trial_metrics(simulate_run(COMPUTE_BOUND, window_s=0.6))
        assert sample.energy is not None
        assert sample.energy.periods == 0
        assert sample.energy.power_w == pytest.approx(sample.edge_power_w)

    def test_long_reference_agrees_with_the_steady_state(self) -> None:
        results = []
        for gpu in (MEMORY_BOUND, BELOW_CAP):
            run = simulate_run(gpu, window_s=12.0)
            result = reference_result(run.readings, run.busy_start, run.busy_end, run.replay_ms, run.calls_per_replay)
            assert result is not None
            assert result["power_w"] == pytest.approx(gpu.steady_power_w(), rel=0.002)
            assert result["energy_mj"] == pytest.approx(gpu.steady_energy_per_call_mj(), rel=0.002)
            assert result["periods"] >= 4
            results.append(result)
        both = combine_references(results, [3.0, 1.0])
        energy = (3 * results[0]["energy_mj"] + results[1]["energy_mj"]) / 4
        seconds = (3 * results[0]["seconds_per_call"] + results[1]["seconds_per_call"]) / 4
        assert both["energy_mj"] == pytest.approx(energy)
        assert both["power_w"] == pytest.approx(energy / seconds / 1000.0)


class TestSamplerOnTheSimulatedDevice:
    def test_sampler_readings_give_the_steady_state(self) -> None:
        """NvmlSampler with the simulated NVML and its clock in place of pynvml and
        perf_counter: the readings it takes, through the harness, give the steady state."""
        run = simulate_run(MEMORY_BOUND, window_s=1.6)
        nvml = SimulatedNvml(run.trace, start=run.busy_start - 0.3)
        sampler = NvmlSampler(device_handle=None, nvml=nvml, clock=nvml.clock)
        with sampler:
            deadline = time.monotonic() + 30.0
            while nvml.clock() < run.busy_end + 0.1 and time.monotonic() < deadline:
                time.sleep(0.005)
        assert sampler.error is None
        readings = sampler.readings()
        assert any(r.sm_clock_mhz is not None for r in readings)
        sample = ShapeSamples("shape", 1.0, hot_ms=run.per_call_ms, hot_mean_ms=run.mean_call_ms)
        hot_energy(sample, readings, run.busy_start, run.busy_end, run.replay_ms, run.calls_per_replay)
        metrics = workload_metrics([sample], ["energy_mj", "power_w"])
        assert metrics["power_w"].value == pytest.approx(MEMORY_BOUND.steady_power_w(), rel=0.01)
        assert metrics["energy_mj"].value == pytest.approx(MEMORY_BOUND.steady_energy_per_call_mj(), rel=0.01)


class TestPeriodSpans:
    def ticks(self, times: list[float], watts: float = 700.0) -> list[Tick]:
        return [Tick(t, watts * t * 1000.0) for t in times]

    def test_every_tick_with_a_partner_a_period_on_starts_a_span(self) -> None:
        ticks = self.ticks([0.05 + 0.1 * i for i in range(16)])  # 0.05 .. 1.55
        periods, pairs = period_spans(ticks, 1.0, 0.04)
        assert periods == 1
        assert [(round(a.t, 2), round(b.t, 2)) for a, b in pairs] == [
            (round(0.05 + 0.1 * i, 2), round(1.05 + 0.1 * i, 2)) for i in range(6)
        ]

    def test_the_periods_whose_spans_cover_the_most_time(self) -> None:
        # 0.0 .. 4.0 s: 31 spans of one second, 21 of two (42 s), 11 of three, 1 of four
        periods, pairs = period_spans(self.ticks([0.1 * i for i in range(41)]), 1.0, 0.04)
        assert periods == 2
        assert len(pairs) == 21
        assert all(b.t - a.t == pytest.approx(2.0) for a, b in pairs)
        # under two seconds, one-second spans
        assert period_spans(self.ticks([0.1 * i for i in range(20)]), 1.0, 0.04)[0] == 1

    def test_no_partner_within_the_tolerance_no_span(self) -> None:
        assert period_spans(self.ticks([0.0, 0.5, 0.93, 1.08]), 1.0, 0.04) == (0, [])

    def test_window_sums_its_spans_and_counts_their_calls(self) -> None:
        ticks = self.ticks([0.05 + 0.1 * i for i in range(16)])
        window = energy_window(ticks, 0.0, 1.6)
        assert window is not None and len(window.spans) == 6
        assert window.seconds == pytest.approx(6.0)
        assert window.power_w == pytest.approx(700.0)
        # 1000 calls per 10 ms replay from t = 0: 100 000 calls a second, six spans of one second
        assert window_calls(window, 0.0, [10.0] * 160, 1000) == pytest.approx(600_000.0)

    def test_a_window_without_spans_counts_first_to_last(self) -> None:
        window = EnergyWindow(energy_mj=70.0, seconds=0.1, t_first=0.2, t_last=0.3, ticks=2)
        assert window_calls(window, 0.0, [10.0] * 40, 10) == pytest.approx(100.0)

    def test_ticks_of_the_simulated_counter_are_a_tenth_of_a_second_apart(self) -> None:
        run = simulate_run(BELOW_CAP, window_s=1.0)
        gaps = np.diff([t.t for t in ticks_from_readings(run.readings)])
        assert np.median(gaps) == pytest.approx(0.1, abs=0.005)


def reference_bench() -> Any:
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "energy_reference.py"
    spec = importlib.util.spec_from_file_location("energy_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestReferenceBench:
    def test_local_rounds_print_and_record_the_agreement(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """bench/gpu/energy_reference.py --local: the same rounds, estimators and summary as
        on the GPU, on the simulated device whose steady state is known."""
        bench = reference_bench()
        out = tmp_path / "reference.json"
        report = bench.main(
            ["--local", "--kernels", "gemm_bf16,gemm_m64", "--rounds", "2", "--reference-s", "6", "--out", str(out)]
        )
        assert json.loads(out.read_text())["summary"] == json.loads(json.dumps(report["summary"]))
        rows = report["rows"]
        assert [(r["kernel"], r["round"], r["order"][0]) for r in rows] == [
            ("gemm_bf16", 0, "trial"),
            ("gemm_m64", 0, "trial"),
            ("gemm_m64", 1, "reference"),
            ("gemm_bf16", 1, "reference"),
        ]
        for row in rows:
            truth = report["truth"][row["kernel"]]
            assert row["reference"]["energy_mj"] == pytest.approx(truth["energy_mj"], rel=0.003)
            assert row["trial"]["energy_mj"] == pytest.approx(truth["energy_mj"], rel=0.01)
        summary = report["summary"]
        assert all(summary[k][q]["passes"] for k in summary for q in ("power", "energy"))
        assert not summary["gemm_m64"]["edge_power"]["passes"]  # the old estimate, 3-6% high
        printed = capsys.readouterr().out
        assert "W ratio" in printed and "gemm_m64" in printed

    def test_unknown_kernels_are_refused_by_name(self) -> None:
        bench = reference_bench()
        with pytest.raises(SystemExit, match="--kernels: unknown"):
            bench.main(["--local", "--kernels", "nope"])
