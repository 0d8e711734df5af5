"""The pure parts of GPU measurement: energy windows, workload aggregation, planning,
correctness verdicts and compiler-report parsing. No GPU, torch or triton needed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.contract import FailureReason
from wire.failures import TrialFailure
from workers.measure.gpu_aggregate import (
    ShapeSamples,
    bootstrap_quantile_ci,
    spread,
    weighted_quantile,
    workload_metrics,
)
from workers.measure.gpu_check import ShapeCheck, tolerance_for, verdict
from workers.measure.gpu_energy import (
    EnergyWindow,
    Tick,
    calls_between,
    energy_per_call_mj,
    energy_window,
    ticks_from_readings,
)
from workers.measure.gpu_harness import (
    BUSY_WARMUP_S,
    IDLE_GAP_S,
    MIN_WARMUP_S,
    GpuActivity,
    wanted_sample_sets,
)
from workers.measure.gpu_timing import plan_calls_per_graph, plan_cold_samples, plan_replays
from workers.measure.gpu_toolchain import (
    acf_ptxas_flags,
    parse_ptxas_report,
    parse_ptxas_version,
    supports_acf,
)
from workers.measure.nvml_sampler import Reading, decode_throttle_reasons, environment_summary


def counter_readings(
    power_w: float,
    poll_s: float,
    tick_s: float,
    start: float,
    end: float,
    idle_w: float = 0.0,
    busy: tuple[float, float] | None = None,
) -> list[Reading]:
    """Readings of a simulated NVML counter that integrates power and publishes every tick_s."""
    readings = []
    t, published, energy, last_tick = start, 0.0, 0.0, start
    step = poll_s / 10
    while t <= end:
        in_busy = busy is None or busy[0] <= t < busy[1]
        energy += (power_w if in_busy else idle_w) * step * 1000.0  # mJ
        if t - last_tick >= tick_s:
            published, last_tick = energy, t
        if round((t - start) / step) % 10 == 0:
            readings.append(Reading(t=t, energy_mj=published))
        t += step
    return readings


class TestEnergyWindow:
    def test_ticks_are_timed_between_polls(self) -> None:
        readings = [Reading(0.0, 10.0), Reading(0.004, 10.0), Reading(0.008, 30.0)]
        assert ticks_from_readings(readings) == [Tick(t=0.006, energy_mj=30.0)]

    def test_steady_power_is_recovered(self) -> None:
        readings = counter_readings(power_w=650.0, poll_s=0.004, tick_s=0.1, start=0.0, end=1.2)
        window = energy_window(ticks_from_readings(readings), 0.05, 1.15)
        assert window is not None
        assert window.ticks >= 9
        assert window.power_w == pytest.approx(650.0, rel=0.02)
        assert all(p == pytest.approx(650.0, rel=0.1) for p in window.interval_power_w)

    def test_idle_time_outside_the_busy_interval_is_not_charged(self) -> None:
        # Busy at 700 W between 0.3 s and 1.3 s, idle at 80 W around it.
        readings = counter_readings(700.0, 0.004, 0.1, 0.0, 1.8, idle_w=80.0, busy=(0.3, 1.3))
        window = energy_window(ticks_from_readings(readings), 0.3, 1.3)
        assert window is not None
        assert window.power_w == pytest.approx(700.0, rel=0.03)

    def test_too_short_a_window_gives_no_number(self) -> None:
        ticks = [Tick(0.0, 0.0), Tick(0.1, 70.0), Tick(0.2, 140.0)]
        assert energy_window(ticks, 0.05, 0.15) is None
        assert energy_window([], 0.0, 1.0) is None

    def test_energy_per_call_divides_by_calls_between_ticks(self) -> None:
        window = EnergyWindow(energy_mj=700.0, seconds=1.0, t_first=0.1, t_last=1.1, ticks=11)
        # 1 s at 0.25 ms per call is 4000 calls: 0.175 mJ each.
        assert energy_per_call_mj(window, 0.25e-3) == pytest.approx(0.175)
        with pytest.raises(ValueError):
            energy_per_call_mj(window, 0.0)

    @given(
        power=st.floats(50, 1000),
        call_s=st.floats(1e-6, 1e-2),
        seconds=st.floats(0.1, 5.0),
    )
    def test_energy_per_call_is_power_times_call_time(self, power: float, call_s: float, seconds: float) -> None:
        window = EnergyWindow(power * seconds * 1000.0, seconds, 0.0, seconds, 3)
        assert energy_per_call_mj(window, call_s) == pytest.approx(power * call_s * 1000.0)

    @given(
        replay_ms=st.lists(st.floats(0.5, 20.0), min_size=1, max_size=40),
        calls=st.integers(1, 64),
        a=st.floats(0.0, 1.0),
        b=st.floats(0.0, 1.0),
    )
    def test_calls_between_counts_each_call_inside(
        self, replay_ms: list[float], calls: int, a: float, b: float
    ) -> None:
        # Reference: every call on its own, evenly spread within its replay, counted for the
        # part of it inside [t0, t1].
        total_s = sum(replay_ms) / 1000.0
        t0, t1 = 5.0 + min(a, b) * total_s, 5.0 + max(a, b) * total_s
        expected, start = 0.0, 5.0
        for ms in replay_ms:
            step = ms / 1000.0 / calls
            for i in range(calls):
                lo, hi = start + i * step, start + (i + 1) * step
                expected += max(0.0, min(hi, t1) - max(lo, t0)) / step
            start += ms / 1000.0
        assert calls_between(5.0, replay_ms, calls, t0, t1) == pytest.approx(expected, rel=1e-6, abs=1e-6)

    def test_energy_is_charged_to_the_calls_that_ran_between_the_ticks(self) -> None:
        # Clocks fall halfway through the hot run: 0.2 ms calls, then 0.25 ms calls at 700 W.
        # The ticks span only the slow half, so its calls, not the run's mean call time,
        # divide the energy.
        replay_ms = [10.0] * 50 + [12.5] * 40  # 50 calls per replay
        busy_start, slow_from = 0.0, 0.5
        t0, t1 = slow_from + 0.05, slow_from + 0.45
        window = EnergyWindow(700.0 * (t1 - t0) * 1000.0, t1 - t0, t0, t1, 5)
        shape = ShapeSamples(
            key="a",
            weight=1.0,
            hot_ms=[ms / 50 for ms in replay_ms],
            hot_mean_ms=sum(replay_ms) / (50 * len(replay_ms)),
            energy=window,
            energy_calls=calls_between(busy_start, replay_ms, 50, t0, t1),
        )
        metrics = workload_metrics([shape], ["energy_mj"])
        assert shape.energy_calls == pytest.approx(0.4 / 0.25e-3)
        assert metrics["energy_mj"].value == pytest.approx(700.0 * 0.25e-3 * 1000.0)
        shape.energy_calls = None  # not counted: the whole run's mean call time (0.222 ms)
        assert workload_metrics([shape], ["energy_mj"])["energy_mj"].value == pytest.approx(
            700.0 * shape.hot_mean_ms, rel=1e-9
        )

    def test_throttle_reasons_decode(self) -> None:
        assert decode_throttle_reasons(0) == []
        assert decode_throttle_reasons(0x4 | 0x20) == ["sw_power_cap", "sw_thermal_slowdown"]
        assert decode_throttle_reasons(0x1000) == ["unknown_0x1000"]

    def test_environment_summary(self) -> None:
        readings = [
            Reading(0.0, 1.0, 1980.0, 40.0, 690.0, 0x4),
            Reading(0.1, 2.0),
            Reading(0.2, 3.0, 1500.0, 45.0, 700.0, 0x0),
        ]
        summary = environment_summary(readings)
        assert summary["sm_clock_mhz"] == {"min": 1500.0, "median": 1980.0, "max": 1980.0}
        assert summary["temperature_c"] == {"start": 40.0, "end": 45.0, "max": 45.0}
        assert summary["throttle_reasons"] == ["sw_power_cap"]


class TestWorkloadAggregation:
    def test_weighted_quantile_of_one_group_is_the_empirical_quantile(self) -> None:
        samples = [float(x) for x in range(1, 101)]
        assert weighted_quantile([samples], [1.0], 0.5) == 50.0
        assert weighted_quantile([samples], [1.0], 0.99) == 99.0
        assert weighted_quantile([samples], [1.0], 1.0) == 100.0

    def test_weights_decide_the_mixture_not_sample_counts(self) -> None:
        fast = [1.0] * 1000
        slow = [10.0] * 10
        # Equal weights: half the mixture is slow, whatever the sample counts.
        assert weighted_quantile([fast, slow], [1.0, 1.0], 0.6) == 10.0
        assert weighted_quantile([fast, slow], [0.99, 0.01], 0.6) == 1.0

    @given(
        st.lists(st.floats(0.01, 100), min_size=1, max_size=50),
        st.lists(st.floats(0.01, 100), min_size=1, max_size=50),
        st.floats(0.1, 10),
        st.floats(0.0, 1.0),
    )
    def test_mixture_quantile_lies_within_the_samples(self, a: list[float], b: list[float], w: float, q: float) -> None:
        value = weighted_quantile([a, b], [1.0, w], q)
        assert min(a + b) <= value <= max(a + b)

    def test_bootstrap_interval_brackets_the_estimate_and_is_repeatable(self) -> None:
        samples = [1.0 + 0.01 * (i % 17) for i in range(400)]
        low, high = bootstrap_quantile_ci([samples], [1.0], 0.99)
        assert low <= weighted_quantile([samples], [1.0], 0.99) <= high
        assert (low, high) == bootstrap_quantile_ci([samples], [1.0], 0.99)

    def shape(self, key: str, weight: float, ms: float, power_w: float) -> ShapeSamples:
        seconds = 1.0
        window = EnergyWindow(
            power_w * seconds * 1000.0, seconds, 0.0, seconds, 11, [power_w * (1 + 0.001 * i) for i in range(10)]
        )
        return ShapeSamples(
            key=key,
            weight=weight,
            hot_ms=[ms * (1 + 0.001 * (i % 5)) for i in range(50)],
            hot_mean_ms=ms,
            energy=window,
            cold_ms=[ms * 1.5 + 0.001 * i for i in range(300)],
        )

    def test_single_shape_metrics(self) -> None:
        metrics = workload_metrics(
            [self.shape("a", 1.0, 0.2, 700.0)],
            ["runtime_ms", "energy_mj", "power_w", "p99_ms", "latency_ms"],
        )
        assert metrics["runtime_ms"].value == pytest.approx(0.2, rel=0.005)
        assert metrics["runtime_ms"].ci_low <= metrics["runtime_ms"].value
        assert metrics["energy_mj"].value == pytest.approx(0.2 * 700.0 / 1000.0 * 1000.0)
        assert metrics["energy_mj"].ci_low < metrics["energy_mj"].value
        assert metrics["energy_mj"].ci_high > metrics["energy_mj"].value
        assert metrics["power_w"].value == pytest.approx(700.0)
        assert metrics["p99_ms"].value >= metrics["latency_ms"].value
        assert metrics["p99_ms"].n == 300

    def test_mixture_weights_runtime_and_energy(self) -> None:
        shapes = [self.shape("a", 3.0, 0.1, 600.0), self.shape("b", 1.0, 1.0, 700.0)]
        metrics = workload_metrics(shapes, ["runtime_ms", "energy_mj", "power_w"])
        assert metrics["runtime_ms"].value == pytest.approx((3 * 0.1 + 1.0) / 4, rel=0.005)
        assert metrics["energy_mj"].value == pytest.approx((3 * 60.0 + 700.0) / 4)
        # Average power of the mix: weighted energy over weighted time.
        assert metrics["power_w"].value == pytest.approx((3 * 60.0 + 700.0) / (3 * 0.1 + 1.0))
        assert "p99_ms" not in metrics

    def test_missing_energy_leaves_energy_out(self) -> None:
        shape = self.shape("a", 1.0, 0.2, 700.0)
        shape.energy = None
        metrics = workload_metrics([shape], ["runtime_ms", "energy_mj"])
        assert "runtime_ms" in metrics
        assert "energy_mj" not in metrics

    def test_spread(self) -> None:
        assert spread([1.0, 1.01, 1.02]) == pytest.approx(0.02)
        with pytest.raises(ValueError):
            spread([])


class TestPlanning:
    def test_graph_size_targets_a_replay_time(self) -> None:
        assert plan_calls_per_graph(0.0002) == 50
        assert plan_calls_per_graph(1e-6) == 1000
        assert plan_calls_per_graph(0.05) == 1

    def test_replays_fill_the_window(self) -> None:
        assert plan_replays(0.01, 1.0) == 100
        assert plan_replays(0.5, 1.0) == 10  # never fewer than the minimum

    def test_cold_samples_respect_budget_and_floor(self) -> None:
        assert plan_cold_samples(0.001, 0.0001, 0.3, 300, 2000) == 300
        assert plan_cold_samples(0.00001, 0.00009, 0.3, 300, 2000) == 2000
        assert plan_cold_samples(0.0001, 0.0001, 0.1, 20, 2000) == 500

    def test_warm_up_floor_follows_the_idle_gap(self) -> None:
        activity = GpuActivity()
        assert activity.floor(now=100.0) == MIN_WARMUP_S  # the process's first measurement
        activity.mark(now=100.0)
        assert activity.floor(now=100.0) == activity.floor(now=100.0 + IDLE_GAP_S - 0.01) == BUSY_WARMUP_S
        assert activity.floor(now=100.0 + IDLE_GAP_S) == MIN_WARMUP_S
        assert activity.floor(now=99.0) == MIN_WARMUP_S  # a clock that went back proves nothing
        assert BUSY_WARMUP_S < MIN_WARMUP_S

    def test_sample_sets_follow_objectives(self) -> None:
        assert wanted_sample_sets(["runtime_ms"]) == (True, False)
        assert wanted_sample_sets(["p99_ms"]) == (False, True)
        assert wanted_sample_sets(["energy_mj", "latency_ms"]) == (True, True)
        assert wanted_sample_sets(["compile_s"]) == (True, False)


class TestCorrectness:
    def test_tolerance_by_dtype(self) -> None:
        assert tolerance_for("bfloat16") == 2e-2
        assert tolerance_for("torch.float32") == 1e-4
        assert tolerance_for("float16", override=0.1) == 0.1
        with pytest.raises(ValueError):
            tolerance_for("int8")

    def test_a_wrong_or_unwritten_output_fails_whatever_else(self) -> None:
        good = ShapeCheck("a", 3e-3, 0.01, 0, 0)
        wrong = ShapeCheck("b", 0.12, 4.0, 0, 0)
        unwritten = ShapeCheck("c", math.inf, 0.0, 64, 64)
        assert verdict([good], 2e-2, 1)[0]
        passed, details = verdict([good, wrong], 2e-2, 1)
        assert not passed
        assert details["shapes"]["b"]["passed"] is False
        assert details["max_rel_l2_err"] == 0.12
        assert not verdict([good, unwritten], 2e-2, 1)[0]


class TestToolchain:
    def test_ptxas_version(self) -> None:
        text = "ptxas: NVIDIA (R) Ptx optimizing assembler\nCuda compilation tools, release 13.0, V13.0.88"
        assert parse_ptxas_version(text) == (13, 0)
        assert parse_ptxas_version("V12.8.93") == (12, 8)
        assert parse_ptxas_version("garbage") is None

    def test_acf_needs_ptxas_13_3(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        assert not supports_acf((13, 0))
        assert supports_acf((13, 3))
        assert acf_ptxas_flags("none", {}, (13, 0), tmp_path) == []
        with pytest.raises(TrialFailure) as refused:
            acf_ptxas_flags("fast", {"acf_files": {"fast": "x"}}, (13, 0), tmp_path)
        assert refused.value.reason == FailureReason.UNSUPPORTED
        assert "13.3" in refused.value.message and "13.0" in refused.value.message
        flags = acf_ptxas_flags("fast", {"acf_files": {"fast": "controls"}}, (13, 3), tmp_path)
        assert flags[0] == "--apply-controls"
        assert (tmp_path / "acf" / "fast.acf").read_text() == "controls"

    def test_ptxas_report(self) -> None:
        log = (
            "ptxas info    : 0 bytes gmem\n"
            "ptxas info    : Compiling entry function 'rmsnorm' for 'sm_90'\n"
            "ptxas info    : Function properties for rmsnorm\n"
            "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
            "ptxas info    : Used 40 registers, used 1 barriers, 32 bytes smem, 388 bytes cmem[0]\n"
        )
        assert parse_ptxas_report(log) == {
            "registers": 40,
            "smem_bytes": 32,
            "barriers": 1,
            "stack_frame_bytes": 16,
            "spill_store_bytes": 8,
            "spill_load_bytes": 12,
        }
