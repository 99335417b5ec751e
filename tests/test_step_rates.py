"""The dashboard's rates: over the steps only (a recompile or a checkpoint left out), and over
the wall time (compiles included), each from reports on the engine's clock."""

from __future__ import annotations

import pytest

from jaxnb._widgets.run_stats import ProcessReports, process_stats
from jaxnb._widgets.run_text import rate_items


def reports(times_steps: list[tuple[float, int]]) -> ProcessReports:
    p = ProcessReports()
    for t, step in times_steps:
        p.add({"time": t, "step": step}, arrival=t)
    return p


def steady(start: float, first_step: int, n: int, every: float) -> list[tuple[float, int]]:
    return [(start + i * every, first_step + i) for i in range(n)]


def test_a_second_compile_is_left_out_of_the_step_rate_and_counted_in_the_wall_rate():
    # step 1 after a 3 s compile, step 2 recompiles (1.5 s), then 2 ms steps
    p = reports([(3.0, 1), (4.5, 2), *steady(4.502, 3, 1000, 0.002)])
    assert p.step_rate() == pytest.approx(500, rel=0.01)
    assert p.mean_rate() < 300  # the old figure: the recompile weighs on it
    elapsed = 4.5 + 1000 * 0.002
    assert p.wall_rate(elapsed) == pytest.approx(p.step / elapsed)  # steps 1..1002 over the wall time


def test_a_checkpoint_pause_is_left_out_and_small_hiccups_are_not():
    p = reports([*steady(0.0, 1, 100, 0.01), (1.0 + 0.99, 101), *steady(2.0, 102, 100, 0.01)])
    assert p.step_rate() == pytest.approx(100, rel=0.01)  # the 1 s pause is not a step
    jittery = reports([(i * 0.01 + (0.02 if i % 10 == 0 else 0.0), i + 1) for i in range(300)])
    steps, seconds = jittery.busy()
    assert steps == 299 and seconds == pytest.approx(jittery.time - jittery.first[0])  # every gap is a step


def test_reports_every_k_steps_count_k_steps_each_and_the_rate_falls_in_silence():
    p = reports([(1.0 + i * 0.1, 10 * (i + 1)) for i in range(40)])
    assert p.step_rate() == pytest.approx(100, rel=0.01)
    assert p.wall_rate(5.0) == pytest.approx(400 / 5.0)  # the first report ended 10 steps
    assert p.rate(now=p.time + 1.0) == pytest.approx(100, rel=0.01)  # within the grace
    assert p.rate(now=p.time + 20.0) < 20  # silent for 20 s


def test_the_summary_names_both_rates():
    procs = {0: reports(steady(2.0, 1, 200, 0.01))}
    rows = process_stats(procs, 1, now=4.0, running=False, elapsed=4.0)
    (steps_name, steps), (wall_name, wall) = rate_items(rows)
    assert steps_name == "steps/s" and steps.startswith("p0: 100 steps/s (step rate")
    assert wall_name == "wall rate" and wall.startswith("p0: 50 steps/s (steps ÷ elapsed")
