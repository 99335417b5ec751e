"""A training run's hardware view, the pure logic: where the time went (goodput), FLOP/s and MFU,
throughput, memory per process on the dashboard, the engine's run clock and sample publishing.
In milliseconds; the engines' side is tests/test_train_hardware.py."""

from __future__ import annotations

import time

import pytest

from jaxnb._core.contract import MONITOR_KEY, REPORT_KEY
from jaxnb._core.goodput import PARTS, ProcessSamples, goodput_text, split
from jaxnb._core.peak_flops import flops_text, peak_of
from jaxnb._engine.run.publisher import BatchPublisher
from jaxnb._engine.run.step_cost import NOT_COMPILED, flops_of
from jaxnb._engine.run.timing import RunClock
from jaxnb._widgets.dashboard import Dashboard
from jaxnb._widgets.run_hardware import flops_items, throughput_items


def sample(started: float, compile_s=1.0, data=0.5, checkpoint=0.25, steps=3.0, flops=2e9,
           kind="cpu", in_use=10**6, peak=None, source="live arrays"):
    parts = {"compile": compile_s, "data": data, "checkpoint": checkpoint, "steps": steps}
    return {"started": started, "time": {**parts, "in_function": sum(parts.values())},
            "flops_per_step": flops, "flops_source": "step", "flops_error": "", "device_kind": kind,
            "memory": {"source": source, "in_use": in_use, "peak": peak or in_use, "limit": None,
                       "rss": 2 * 10**8, "peak_rss": 3 * 10**8, "device": "cpu:0"}}


def test_the_parts_add_up_to_the_wall_time_and_name_the_slowest_process():
    fast, slow = ProcessSamples(), ProcessSamples()
    fast.add(sample(1.0))
    slow.add(sample(1.0, data=2.5))
    goodput = split(10.0, {0: fast, 1: slow}, recovery=1.0)
    parts = goodput["parts"]
    assert sum(parts[p] for p in PARTS) == pytest.approx(10.0)
    assert parts["data"] == pytest.approx(1.5) and parts["recovery"] == 1.0
    assert goodput["slowest"]["data"] == {"process": 1, "seconds": 2.5}
    assert goodput["processes"][0]["idle"] == pytest.approx(10.0 - 1.0 - 4.75)
    assert goodput["goodput"] == pytest.approx(0.3)
    text = goodput_text(goodput)
    assert text == ("steps 30% · compile 10% · data wait 15% (slowest [p1]: 2.5 s) · checkpoint 2% · "
                    "recovery 10% · idle 32% (slowest [p0]: 4.2 s) of 10.0 s")


def test_a_recovered_run_adds_its_attempts_up_and_keeps_the_peak():
    samples = ProcessSamples()
    samples.add(sample(1.0, steps=1.0, in_use=5 * 10**6))
    samples.add(sample(1.0, steps=2.0, in_use=10**6))  # the same attempt, later: totals replace
    samples.add(sample(2.0, steps=0.5, in_use=10**6))  # the attempt after a recovery: added
    assert samples.parts()["steps"] == pytest.approx(2.5)
    assert samples.parts()["in_function"] == pytest.approx(2 * 1.75 + 2.5)
    assert samples.memory()["peak"] == 5 * 10**6 and samples.memory()["in_use"] == 10**6


def test_no_sample_leaves_the_wall_time_idle():
    goodput = split(4.0, {}, recovery=0.0)
    assert goodput["parts"]["idle"] == 4.0 and goodput["goodput"] == 0.0


@pytest.mark.parametrize("kind, peak", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM bf16 dense 989 TFLOP/s"),
    ("NVIDIA H100 PCIe", "H100 PCIe bf16 dense 756 TFLOP/s"),
    ("NVIDIA H200", "H200 bf16 dense 989 TFLOP/s"),
    ("NVIDIA L40S", "L40S bf16 dense 362 TFLOP/s"),
    ("NVIDIA L4", "L4 bf16 dense 121 TFLOP/s"),
    ("TPU v5 lite", "TPU v5e bf16 197 TFLOP/s"),
    ("TPU v5", "TPU v5p bf16 459 TFLOP/s"),
])
def test_known_devices_have_a_peak_named_with_it(kind, peak):
    assert peak_of(kind)[1] == peak


def test_mfu_is_achieved_over_the_peak_and_a_cpu_shows_flops_only():
    gpu = ProcessSamples()
    gpu.add(sample(1.0, flops=1e12, kind="NVIDIA H100 80GB HBM3"))
    items = dict(flops_items({0: gpu}, steps_per_s=98.9))
    assert items["FLOP/s"].startswith("98.9 TFLOP/s per device (1e+12 FLOPs per step")
    assert items["MFU"].startswith("10.0% of H100 SXM bf16 dense 989 TFLOP/s (the device's peak; ")
    cpu = ProcessSamples()
    cpu.add(sample(1.0, flops=2e9))
    assert set(dict(flops_items({0: cpu}, 10.0))) == {"FLOP/s"}
    assert peak_of("cpu") is None and flops_text(2e10) == "20 GFLOP/s"
    unknown = ProcessSamples()
    unknown.add({**sample(1.0, flops=None), "flops_error": "TypeError: no"})
    assert dict(flops_items({0: unknown}, 10.0))["FLOP/s"].endswith("; TypeError: no")


def test_throughput_comes_from_batch_size_and_tokens_per_step():
    assert throughput_items({"batch_size": 256, "tokens": 256 * 1024, "loss": 1.0}, 2.0) == [
        ("examples/s", "512"), ("tokens/s", "524,288")]
    assert throughput_items({"loss": 1.0}, 2.0) == []


def records(process: int, steps: int, dt: float = 0.1, batch_size: int = 32):
    t0 = time.time() - steps * dt
    return [{"process": process, "seq": s, "step": s + 1, "time": t0 + s * dt,
             "metrics": {"loss": 1 / (s + 1), "batch_size": batch_size}, "checkpoint": None}
            for s in range(steps)]


def test_the_dashboard_shows_memory_flops_and_time_in_its_text_and_static_copy():
    dash = Dashboard("hw", num_processes=2)
    for p in (0, 1):
        dash.add(records(p, 50))
    assert "memory" not in dash.text()  # nothing said before the processes send their samples
    dash.add_sample(0, sample(1.0, flops=1e9))
    dash.add_sample(1, sample(1.0, flops=1e9, in_use=2 * 10**6))
    dash.finish("finished")
    text = dash.text()
    head = next(line for line in text.splitlines() if line.startswith("process"))
    assert head.split() == ["process", "last", "step", "steps/s", "last", "report", "memory", "(peak)"]
    assert "2.0 MB arrays (peak 2.0 MB) · RSS 200.0 MB" in text
    assert "FLOP/s      10 GFLOP/s per device (1e+09 FLOPs per step" in text
    assert "examples/s  320" in text and "\ntime        steps " in text
    html = dash.summary_html()
    assert "GFLOP/s per device" in html and "data wait" in html and "[p1] 2.0 MB arrays" in html
    svg = next(x.value for x in walk(dash.widget) if "<svg" in str(getattr(x, "value", "")))
    assert "loss" in svg and "batch_size" not in svg  # the throughput's key is not a curve


def walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def test_the_run_clock_counts_nested_parts_once():
    clock = RunClock()
    clock.enter("data")
    time.sleep(0.05)
    clock.enter("compile")  # putting the batch on the devices compiles
    time.sleep(0.05)
    clock.leave("compile")
    clock.leave("data")
    clock.leave("checkpoint")  # began before the clock: ignored
    clock.stop()
    parts = clock.parts()
    assert parts["compile"] >= 0.05 and parts["data"] >= 0.05  # each sleep counted once, in its own part
    assert parts["compile"] + parts["data"] + parts["checkpoint"] + parts["steps"] == \
        pytest.approx(parts["in_function"])


def test_flops_of_takes_a_number_and_says_what_it_takes_otherwise():
    assert flops_of(1234) == 1234.0
    with pytest.raises(TypeError, match="takes the jitted step"):
        flops_of(object())
    assert "step.trace(state, batch)" in NOT_COMPILED


def test_the_publisher_sends_the_last_sample_even_without_reports():
    sent = []
    publisher = BatchPublisher(sent.append, monitor=lambda: {"n": len(sent)}, monitor_every=3600)
    publisher.add({"process": 0, "seq": 0, "step": 1, "time": 0.0, "metrics": {"a": 1}})
    publisher.close()
    assert [sorted(d) for d in sent] == [[MONITOR_KEY, f"{REPORT_KEY}0"]]
    quiet = []
    BatchPublisher(quiet.append, monitor=lambda: {"n": 1}, monitor_every=3600).close()
    assert quiet == [{MONITOR_KEY: {"n": 1}}]
