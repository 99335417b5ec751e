"""The live training dashboard, on real ipywidgets, matplotlib and an IPython shell."""

from __future__ import annotations

import base64
import math
import subprocess
import sys
import time

import ipywidgets as w
import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from jaxnb._widgets.dashboard import Dashboard
from jaxnb._widgets.plots import MetricsFigure, downsample, family, group_families

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    from support.clusters import real_shell

    return real_shell()


def loss(step: int) -> float:
    return 2.0 * math.exp(-step / 3000) + 0.05


def batches(steps: int, processes: int = 2, size: int = 500, dt=(0.01, 0.025)):
    """Reports of ``processes`` processes in batches; process i takes ``dt[i]`` s a step."""
    t0 = time.time() - 1000
    for start in range(0, steps, size):
        batch = []
        for p in range(processes):
            for s in range(start, min(start + size, steps)):
                metrics = {"loss": loss(s), "lr": 1e-3}
                if s % 100 == 99:
                    metrics["val_loss"] = loss(s) + 0.1
                ckpt = f"/runs/demo/ckpt_{s + 1}" if (s + 1) % 1000 == 0 else None
                batch.append({"process": p, "seq": s, "step": s + 1, "time": t0 + s * dt[p],
                              "metrics": metrics, "checkpoint": ckpt})
        yield batch


def walk(widget: w.Widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def find(widget: w.Widget, kind: type) -> list:
    return [x for x in walk(widget) if isinstance(x, kind)]


@pytest.fixture(scope="module")
def loaded() -> Dashboard:
    """20k reports (10k steps x 2 processes; process 1 is 2.5x slower), refreshed once."""
    dash = Dashboard("demo", num_processes=2, total_steps=10_000)
    for batch in batches(10_000):
        dash.add(batch)
    assert dash.refresh(force=True)
    return dash


def test_many_records_fill_progress_and_process_table(loaded: Dashboard) -> None:
    (bar,) = find(loaded.widget, w.IntProgress)
    assert (bar.value, bar.max) == (10_000, 10_000)
    rows = loaded.process_stats()
    assert [r["process"] for r in rows] == [0, 1]
    assert [r["step"] for r in rows] == [10_000, 10_000]
    assert all(r["steps_per_s"] > 0 for r in rows)
    assert rows[0]["steps_per_s"] == pytest.approx(100, rel=0.05)
    assert rows[1]["steps_per_s"] == pytest.approx(40, rel=0.05)
    assert rows[1]["flag"] == "slow" and rows[0]["flag"] == ""
    assert shown(loaded, "<table").value.count("<tr>") == 3
    text = loaded.text()
    rows = [line.split() for line in text.splitlines() if line.startswith(("0 ", "1 "))]
    assert [row[:2] for row in rows] == [["0", "10000"], ["1", "10000"]]
    assert rows[1][-1] == "slow" and rows[0][-1] != "slow"
    assert "steps/s     p0: 100 steps/s · p1: 40 steps/s" in text and "\nETA" in text
    assert "checkpoint  /runs/demo/ckpt_10000" in text


def test_text_says_status_progress_rates_and_checkpoint(loaded: Dashboard) -> None:
    """What a terminal shows: the summary, then a line per process, then what the plot holds."""
    lines = loaded.text().splitlines()
    assert lines[:4] == ["run         demo", "status      running", "steps       10000 / 10000",
                         lines[3]] and lines[3].startswith("elapsed     ")
    assert lines[-4].split() == ["process", "last", "step", "steps/s", "last", "report"]
    assert lines[-1] == "plotted: 10000 reports, steps 1–10000"
    assert f"loss        {loss(9999):.6g}" in lines


def shown(dash: Dashboard, marker: str) -> w.HTML:
    """The dashboard's HTML widget whose content holds ``marker`` (``<svg``: the plot)."""
    return next(x for x in find(dash.widget, w.HTML) if marker in x.value)


def plot_html(dash: Dashboard) -> str:
    return shown(dash, "<svg").value


def test_live_plot_is_svg_and_final_plot_is_png(loaded: Dashboard) -> None:
    svg = plot_html(loaded)
    assert svg.count("<svg") == 2 and "<polyline" in svg  # panels "loss" and "lr"
    assert ">loss<" in svg and ">lr<" in svg and f"val_loss  {loss(9999) + 0.1:.4g}" in svg
    assert loaded.final_png().startswith(PNG)


def test_summary_has_final_values(loaded: Dashboard) -> None:
    html = loaded.summary_html()
    for text in ("demo", "running", "10000 / 10000", f"{loss(9999):.6g}",
                 f"{loss(9999) + 0.1:.6g}", "/runs/demo/ckpt_10000", "p1: 40 steps/s"):
        assert text in html


def test_a_failed_runs_static_text_has_its_quotes_not_html_entities() -> None:
    """What a text viewer (``python -m jaxnb.show_notebook``) reads of the saved summary."""
    from jaxnb._widgets._display import html_to_text

    board = Dashboard("it's \"quoted\"", 2)
    board.finish("failed", "ValueError: bad 'shard' <3>")
    text = html_to_text(board.summary_html())
    assert "failed — ValueError: bad 'shard' <3>" in text and "it's \"quoted\"" in text, text
    assert "&" not in text


def test_families_share_a_panel() -> None:
    assert [family(n) for n in ("loss", "train_loss", "val_loss", "eval/acc", "acc_test",
                                "validation-loss", "test")] == [
        "loss", "loss", "loss", "acc", "acc", "loss", "test"]
    groups = group_families(["val_loss", "lr", "loss", "eval_acc", "train_acc"])
    assert groups == {"loss": ["loss", "val_loss"], "lr": ["lr"], "acc": ["train_acc", "eval_acc"]}
    x = np.arange(100.0)
    fig = MetricsFigure()
    png = fig.render({"loss": (x, x), "val_loss": (x[::10], x[::10]), "lr": (x, x)})
    assert png.startswith(PNG)
    axes = fig._fig.axes
    assert [ax.get_title() for ax in axes] == ["loss", "lr"]
    assert [t.get_text().split()[0] for t in axes[0].get_legend().get_texts()] == ["loss", "val_loss"]
    assert axes[0].get_legend().get_texts()[0].get_text() == "loss  99"  # the last value


def test_downsample_keeps_spikes() -> None:
    x = np.arange(50_000.0)
    y = np.zeros_like(x)
    y[12_345] = 7.0
    xs, ys = downsample(x, y)
    assert len(xs) == len(ys) <= 2000 and ys.max() == 7.0


def test_stop_button_calls_on_stop() -> None:
    calls = []
    dash = Dashboard("stoppable", 1, on_stop=lambda: calls.append(1))
    (button,) = find(dash.widget, w.Button)
    assert not button.disabled
    button.click()
    button.click()  # already stopping: no second call
    assert calls == [1] and dash.status == "stopping" and button.disabled
    (hidden,) = find(Dashboard("plain", 1).widget, w.Button)
    assert hidden.disabled and hidden.layout.display == "none"


def test_refresh_is_throttled() -> None:
    from jaxnb._widgets.dashboard import MIN_INTERVAL_S

    dash = Dashboard("throttle", 1)
    dash.add(next(batches(10, processes=1)))
    assert dash.refresh(force=True)
    first = time.monotonic()
    assert not dash.refresh()
    assert dash.refresh(force=True)
    while not dash.refresh():
        assert time.monotonic() - first < 5
        time.sleep(0.02)
    assert time.monotonic() - first >= MIN_INTERVAL_S


def test_unknown_total_hides_bar_and_eta() -> None:
    dash = Dashboard("open-ended", 2)
    dash.add(next(batches(200)))
    dash.refresh(force=True)
    (bar,) = find(dash.widget, w.IntProgress)
    assert bar.layout.display == "none" and "ETA" not in dash.text()
    assert "steps/s" in dash.text() and "elapsed" in dash.text()


def test_known_total_shows_progress_and_eta() -> None:
    dash = Dashboard("bounded", 2, total_steps=1000)
    dash.add(next(batches(200)))
    dash.refresh(force=True)
    (bar,) = find(dash.widget, w.IntProgress)
    assert bar.layout.display is None and (bar.value, bar.max) == (200, 1000)
    assert "steps       200 / 1000" in dash.text() and "\nETA" in dash.text()


def test_waiting_process_and_checkpoint() -> None:
    dash = Dashboard("partial", 3)
    dash.add(next(batches(50, processes=1)))
    assert [r["flag"] for r in dash.process_stats()] == ["", "waiting", "waiting"]
    dash.set_checkpoint("/tmp/ckpt <1>")
    assert "checkpoint  /tmp/ckpt <1>" in dash.text()
    assert "/tmp/ckpt &lt;1&gt;" in shown(dash, "last checkpoint").value  # escaped in the page


def test_show_then_finish_leave_static_png_and_html(shell: InteractiveShell) -> None:
    dash = Dashboard("headless", 2, total_steps=300, on_stop=lambda: None)
    with capture_output() as shown:
        dash.show()
    (live,) = shown.outputs
    assert "application/vnd.jupyter.widget-view+json" in live.data
    assert "text/html" in live.data
    for batch in batches(300):
        dash.add(batch)
    with capture_output() as cap:
        dash.finish("finished")
    kinds = [set(out.data) for out in cap.outputs]
    assert any("text/html" in k for k in kinds) and any("image/png" in k for k in kinds)
    html = next(o.data["text/html"] for o in cap.outputs if "text/html" in o.data)
    png = next(o.data["image/png"] for o in cap.outputs if "image/png" in o.data)
    assert "finished" in html and f"{loss(299):.6g}" in html
    assert base64.b64decode(png).startswith(PNG)
    assert dash.status == "finished" and find(dash.widget, w.Button)[0].disabled
    elapsed = dash.elapsed
    time.sleep(0.01)
    assert dash.elapsed == elapsed  # frozen


def test_failed_run_without_metrics_still_renders(shell: InteractiveShell) -> None:
    dash = Dashboard("empty", 1)
    with capture_output() as cap:
        dash.finish("failed", "process 0 raised ValueError")
    assert any("image/png" in o.data for o in cap.outputs)
    assert "ValueError" in dash.summary_html() and dash.final_png().startswith(PNG)


def test_kernel_side_does_not_import_jax() -> None:
    code = "import sys, jaxnb._widgets.dashboard; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_smoothing_is_a_debiased_moving_average() -> None:
    from jaxnb._widgets.plots import smooth

    y = np.array([1.0, 1.0, 1.0, 5.0])
    assert smooth(y, 0.0) is y
    assert np.allclose(smooth(y, 0.6)[:3], 1.0)  # debiased: no pull towards 0 at the start
    assert 1.0 < smooth(y, 0.6)[3] < 5.0


def test_controls_redraw_with_smoothing_and_log_scale() -> None:
    dash = Dashboard("controls", 1)
    dash.add(next(batches(400, processes=1, size=400)))
    dash.refresh(force=True)
    before = plot_html(dash)
    assert "loss (log)" not in before and before.count("<polyline") == 3
    (scale,) = find(dash.widget, w.ToggleButtons)
    scale.value = "log"
    assert "loss (log)" in plot_html(dash)
    (slider,) = find(dash.widget, w.FloatSlider)
    slider.value = 0.9
    after = plot_html(dash)
    assert after.count("<polyline") == 6  # each raw curve drawn faintly under its smoothed one
    assert "plotted: 400 reports, steps 1–400" in dash.text()


def test_plot_is_drawn_by_the_page_at_its_own_size() -> None:
    from jaxnb._widgets.svg_plot import HEIGHT, WIDTH

    dash = Dashboard("sharp", 1)
    dash.add(next(batches(50, processes=1)))
    dash.refresh(force=True)
    svg = plot_html(dash)
    assert f"width='{WIDTH}' height='{HEIGHT}'" in svg and "<circle" in svg  # few points: markers
    assert not find(dash.widget, w.Image)  # no bitmap to stretch or blur


def test_finish_keeps_the_live_plot_and_table(shell: InteractiveShell) -> None:
    dash = Dashboard("kept", 2, on_stop=lambda: None)
    with capture_output():
        dash.show()
    for batch in batches(100):
        dash.add(batch)
    with capture_output() as cap:
        dash.finish("finished", "stopped on request after 100 reports")
    assert shown(dash, "<svg").layout.display is None and "<polyline" in plot_html(dash)
    table = shown(dash, "<table")
    assert table.layout.display != "none" and table.value.count("<tr>") == 3
    (update,) = cap.outputs  # the static fallback of the one shown output is updated in place
    assert "application/vnd.jupyter.widget-view+json" in update.data
    assert "jaxnb-summary" in update.data["text/html"] and "data:image/png" in update.data["text/html"]


def test_svg_panels_log_axis_hover_and_limits() -> None:
    from jaxnb._widgets.plots import MAX_PANELS, build_panels
    from jaxnb._widgets.svg_plot import render_svg

    x = np.arange(1.0, 301.0)
    main = {"loss": (x, 10.0 ** (-x / 50)), "val_loss": (x[::30], 10.0 ** (-x[::30] / 50))}
    svg = render_svg(build_panels(main, [], set()))
    assert "loss (log)" in svg  # spans 10^6: the auto scale picks log
    assert svg.count("<polyline") == 2 and "<title>loss: " in svg and "at step 300</title>" in svg
    assert ">1e-06<" in svg or ">1e-05<" in svg  # decade ticks
    linear = render_svg(build_panels(main, [], set(), log=False))
    assert "(log)" not in linear
    many = {f"m{i}": (x, x) for i in range(MAX_PANELS + 2)}
    assert "+2 more metric families" in render_svg(build_panels(many, [], set()))
    assert "no metrics reported yet" in render_svg([])


def test_a_recovery_is_marked_counted_and_its_lost_points_dropped() -> None:
    dash = Dashboard("recovered", 2, on_stop=lambda: None)
    dash.set_recoveries(2)
    for batch in batches(30, size=30):
        dash.add(batch)
    dash.set_status("recovering", "[p1] killed by SIGKILL at step 30; resuming from step 20")
    said = "recovering:</b> [p1] killed by SIGKILL at step 30; resuming from step 20"
    assert said in shown(dash, "<b>recovered</b>").value  # the title
    assert "status      recovering — [p1] killed by SIGKILL at step 30; resuming from step 20" in dash.text()
    assert not find(dash.widget, w.Button)[0].disabled  # Stop ends a recovery too
    dash.rewind(20)
    assert f"loss        {loss(19):.6g}" in dash.text().splitlines()  # the points after 20 dropped
    assert "plotted: 30 reports, steps 1–20" in dash.text()
    assert [r["step"] for r in dash.process_stats()] == [20, 20]
    dash.set_status("running", "recovered 1 of 2")
    assert "recoveries  recovered 1 of 2 (resumed from step 20)" in dash.text()
    dash.recovery_took(1.42, ("first step", 0.61))  # once the resumed run's first step is done
    assert ("recoveries  recovered 1 of 2 (resumed from step 20 in 1.42 s, longest: first step "
            "0.61 s)") in dash.text()
    assert "resumed from step 20 in 1.42 s, longest: first step 0.61 s" in shown(
        dash, "steps/s").value  # the line under the progress bar
    assert dash.refresh(force=True)
    svg = plot_html(dash)
    assert svg.count("class='jaxnb-recovery'") == svg.count("<svg") > 0  # one per panel
    assert "resumed from step 20" in svg
    assert dash.final_png().startswith(PNG)
    assert "recovered 1 of 2" in dash.summary_html()


@pytest.mark.parametrize("status", ["finished", "stopped", "failed", "interrupted"])
def test_an_ended_run_disables_stop_and_says_how_it_ended(status) -> None:
    dash = Dashboard("ended", 1, on_stop=lambda: None)
    dash.set_status(status, "on request after 3 reports" if status == "stopped" else "")
    (button,) = find(dash.widget, w.Button)
    assert button.disabled and button.button_style == "" and button.description == status.capitalize()
    title = shown(dash, "<b>ended</b>").value
    assert f">{status}</b>" in title and "finished stopped" not in title
    said = status + (" — on request after 3 reports" if status == "stopped" else "")
    assert dash.text().splitlines()[1] == f"status      {said}"


def test_a_run_that_changes_size_shows_the_process_count_track_and_its_markers() -> None:
    dash = Dashboard("elastic", 3, on_stop=lambda: None)
    dash.resized(0, 3, 3)  # the track begins (a --min-processes run)
    three = (0.01, 0.01, 0.01)
    for batch in batches(12, processes=3, size=12, dt=three):
        dash.add(batch)
    dash.rewind(10)
    dash.resized(10, 3, 2)  # went on with 2 from step 10
    for batch in batches(20, processes=2, size=20):
        dash.add([r for r in batch if r["step"] > 10])
    dash.resized(20, 2, 3)  # grew back at the checkpoint of step 20
    for batch in batches(30, processes=3, size=30, dt=three):
        dash.add([r for r in batch if r["step"] > 20])
    assert dash.refresh(force=True)
    assert "processes   3 of 3 (3→2 at step 10, 2→3 at step 20)" in dash.text()
    assert [r["process"] for r in dash.process_stats()] == [0, 1, 2]
    svg = plot_html(dash)
    assert svg.count("<svg") == 3 and ">processes<" in svg  # loss, lr, then the track
    assert svg.count("class='jaxnb-shrink'") == svg.count("class='jaxnb-grow'") == 3  # each panel
    assert "3 → 2 processes at step 10" in svg and "2 → 3 processes at step 20" in svg
    track = svg[svg.index(">processes<"):]
    assert "processes  3" in track  # its last value in the legend
    assert dash.final_png().startswith(PNG)
    assert "3 processes" in shown(dash, "steps").value  # the line under the title


def test_a_run_that_does_not_change_size_draws_no_track() -> None:
    dash = Dashboard("fixed", 2)
    for batch in batches(10, size=10):
        dash.add(batch)
    assert dash.refresh(force=True)
    assert ">processes<" not in plot_html(dash) and "processes " not in dash.text()
