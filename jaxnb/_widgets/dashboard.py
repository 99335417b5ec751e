"""Live training dashboard: status, progress, metric curves, per-process rates, Stop; and the same
as text (:meth:`Dashboard.text`) for terminals and text viewers."""

from __future__ import annotations

import html
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as w
from IPython.display import Image, display

from jaxnb._core.goodput import ProcessSamples
from jaxnb._core.memory_text import memory_cell

from ._display import display_widget, in_ipython, png_img, widget_bundle
from .dashboard_recovery import RecoveryTrack
from .plots import Curves, MetricsFigure, build_panels
from .run_hardware import UNITS, hardware_items
from .run_stats import ProcessReports, process_stats
from .run_text import (
    duration_text,
    process_table,
    process_table_text,
    rate_items,
    rate_text,
    steps_text,
    summary_table,
    text_columns,
)
from .stop_control import StopControl
from .svg_plot import MAX_POINTS as SVG_POINTS
from .svg_plot import render_svg

STEP_NAMES = ("step", "epoch", "iteration")  # the x axis; not plotted as curves
NOT_PLOTTED = (*STEP_NAMES, *UNITS)  # batch_size and tokens give the throughput, not curves
PROCESSES = "processes"  # the process-count track of a --min-processes run
TERMINAL = ("finished", "stopped", "failed", "interrupted")
_STYLE = {"running": ("#1f77b4", ""), "stopping": ("#e67e00", "warning"),
          "recovering": ("#e67e00", "warning"), "finished": ("#2ca02c", "success"),
          "stopped": ("#2ca02c", "success"), "failed": ("#d62728", "danger"),
          "interrupted": ("#e67e00", "warning")}  # status -> (colour, progress bar style)
MIN_INTERVAL_S = 0.1
_PLOT_SHARE = 20  # redraw the plot at most every 20x the time one drawing takes
_MAX_FAINT = 7  # processes after the first drawn faintly in the plot


def history_text(lead: ProcessReports) -> str:
    """What the plot holds: ``process 0: 120 reports, steps 1–120``."""
    return f"plotted: {lead.count} reports, steps {lead.first[1]}–{lead.step}"


class Dashboard(RecoveryTrack, StopControl):
    """Live view of one training run: ``add`` report batches, ``refresh`` to redraw."""

    def __init__(
        self,
        run_name: str,
        num_processes: int,
        total_steps: int | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.run_name, self.num_processes, self.total_steps = run_name, num_processes, total_steps
        self.status, self.message = "running", ""
        self.checkpoint: str | None = None
        #: The step each recovery resumed from (``--max-failures``), drawn as markers.
        self.recoveries: list[int] = []
        #: Each recovery's seconds and its longest phase (once its first step is done).
        self.recovery_times: list[tuple[float, tuple[str, float] | None]] = []
        self.max_failures = 0
        #: ``--min-processes``: (step, process count) from the start and at each change, drawn
        #: as the ``processes`` track; each change as (step, old, new), drawn as a marker.
        self.sizes: list[tuple[int, int]] = []
        self.resizes: list[tuple[int, int, int]] = []
        self._on_stop = on_stop
        self._procs: dict[int, ProcessReports] = {}
        self._samples: dict[int, ProcessSamples] = {}  # memory, time parts, FLOPs per step
        self._recovering_since, self._recovery_s = 0.0, 0.0
        self._lock, self._render_lock = threading.RLock(), threading.Lock()
        self._figure = MetricsFigure()
        self._start, self._end, self._end_wall = time.monotonic(), 0.0, 0.0
        self._last_refresh = -math.inf
        self._plot_interval = MIN_INTERVAL_S
        self._dirty, self._drawn, self._handle = True, False, None
        self._title, self._speed, self._table, self._ckpt = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        self._history, self._hardware = w.HTML(), w.HTML()
        self._bar = w.IntProgress(min=0, max=1, layout=w.Layout(width="40%"))
        self._plot = w.HTML(layout=w.Layout(display="none"))  # inline SVG: the page draws it
        self._smoothing = w.FloatSlider(value=0.0, min=0.0, max=0.99, step=0.01, description="smoothing",
                                        readout_format=".2f", continuous_update=False,
                                        layout=w.Layout(width="300px"))
        self._scale = w.ToggleButtons(options=["auto", "linear", "log"], value="auto",
                                      description="y scale", tooltips=[
                                          "log for loss-like metrics spanning 1000x, else linear",
                                          "linear y axis", "log y axis"],
                                      style={"button_width": "64px", "description_width": "auto"})
        for control in (self._smoothing, self._scale):
            control.observe(self._replot, names="value")
        self._stop = w.Button(description="Stop", icon="stop", button_style="danger",
                              tooltip="Ask every process to stop at the same step")
        self._stop.on_click(self._clicked)
        if on_stop is None:
            self._stop.disabled, self._stop.layout.display = True, "none"
        self._box = w.VBox([w.HBox([self._title, self._stop]), w.HBox([self._bar, self._speed]),
                            self._hardware,
                            w.HBox([self._smoothing, self._scale]), self._plot, self._history,
                            self._table,
                            self._ckpt])
        self._box.add_class("jaxnb-dashboard")
        self._update()

    @property
    def widget(self) -> w.VBox:
        """The live ipywidgets layout."""
        return self._box

    @property
    def elapsed(self) -> float:
        """Seconds since the run started (frozen once it ends)."""
        return (self._end or time.monotonic()) - self._start

    def add(self, records: list[dict[str, Any]]) -> None:
        """Book a batch of reports (O(batch); does not redraw)."""
        arrival = time.time()
        with self._lock:
            for rec in records:
                proc = self._procs.get(rec["process"]) or self._procs.setdefault(
                    rec["process"], ProcessReports())
                proc.add(rec, arrival)
                if rec.get("checkpoint"):
                    self.checkpoint = str(rec["checkpoint"])
            self._dirty = self._dirty or bool(records)

    def add_sample(self, process: int, sample: dict[str, Any]) -> None:
        """Book a process's sample: its memory, where its time went, FLOPs per step."""
        with self._lock:
            found = self._samples.get(process) or self._samples.setdefault(process, ProcessSamples())
            found.add(sample)

    def refresh(self, force: bool = False) -> bool:
        """Update text, table and plot, at most a few times a second unless ``force``; True if it did.

        Updating takes at most 1/_PLOT_SHARE of one core (on a small machine
        that core is the training's): after each update, the next waits 20x
        the CPU time this one took (this thread's CPU time, not wall time: on a
        busy machine, waiting for a core is not work).
        """
        start, cpu = time.monotonic(), time.thread_time()
        if not force and start - self._last_refresh < self._plot_interval:
            return False
        self._last_refresh = start
        self._update()
        if self._dirty or not self._drawn:
            self._show_plot(self._render_svg())
        self._plot_interval = max(MIN_INTERVAL_S, _PLOT_SHARE * (time.thread_time() - cpu))
        return True

    def set_status(self, status: str, message: str = "") -> None:
        """Set the run status (running/stopping/finished/failed/interrupted)."""
        self.status, self.message = status, message
        now = time.monotonic()
        if status == "recovering" and not self._recovering_since:
            self._recovering_since = now
        elif status != "recovering" and self._recovering_since:
            self._recovery_s += now - self._recovering_since
            self._recovering_since = 0.0
        if status in TERMINAL and not self._end:
            self._end, self._end_wall = time.monotonic(), time.time()
        elif status == "running":
            self._end = self._end_wall = 0.0
        self._update_stop()
        if status in TERMINAL:  # the run is over: nothing left to stop
            self._stop.button_style, self._stop.description = "", status.capitalize()
        self._bar.bar_style = _STYLE.get(status, ("", ""))[1]
        self._update()

    def set_checkpoint(self, path: str | None) -> None:
        """Record the latest checkpoint path."""
        self.checkpoint = path
        self._update()

    def final_png(self) -> bytes:
        """PNG bytes of the metric curves as they are now (matplotlib; for static viewers)."""
        main, others, message = self._curves()
        with self._render_lock:
            return self._figure.render(main, others, skip=NOT_PLOTTED, message=message,
                                       smoothing=self._smoothing.value, log=self._log(),
                                       markers=tuple(self.recoveries), resizes=tuple(self.resizes))

    def process_stats(self) -> list[dict[str, Any]]:
        """Per process: last step, steps/s (recent and mean), last report age, flag."""
        now = self._end_wall or time.time()  # frozen once the run has ended
        with self._lock:
            procs = dict(self._procs)
            memory = {p: memory_cell(s.memory()) for p, s in self._samples.items()}
        rows = process_stats(procs, self.num_processes, now, self.status == "running", self.elapsed)
        for row in rows if memory else ():
            row["memory"] = memory.get(row["process"], "—")
        return rows

    def summary_html(self) -> str:
        """Static HTML table: run, status, steps, elapsed, final metrics, checkpoint, rates."""
        return summary_table(self._summary_items())

    def text(self) -> str:
        """The dashboard as plain text: what a terminal or a text viewer shows of it.

        The summary (run, status, steps, elapsed, ETA while running, recoveries with the steps
        they resumed from, the last value of each metric, checkpoint, mean steps/s), then the
        process table (last step, recent steps/s, last report, flag) and what the plot holds.
        """
        lead = self._lead()
        parts = [text_columns([list(item) for item in self._summary_items()]),
                 process_table_text(self.process_stats())]
        if lead:
            parts.append(history_text(lead))
        return "\n".join(parts)

    def _summary_items(self) -> list[tuple[str, str]]:
        lead = self._lead()
        items = [("run", self.run_name),
                 ("status", self.status + (f" — {self.message}" if self.message else "")),
                 ("steps", self._steps_text(lead)), ("elapsed", duration_text(self.elapsed))]
        eta = self._eta(lead)
        if eta:
            items.append(("ETA", eta))
        if self.max_failures:
            items.append(("recoveries", self._recovered_text()))
        if self.sizes:
            items.append(("processes", self._sizes_text()))
        items += [(k, f"{ys[-1]:.6g}") for k, (_, ys) in (lead.metrics if lead else {}).items()]
        items += [("checkpoint", self.checkpoint or "—"),
                  *rate_items(self.process_stats())]
        return items + self._hardware_items(lead)

    def _hardware_items(self, lead: ProcessReports | None) -> list[tuple[str, str]]:
        """FLOP/s and MFU, throughput, where the time went, memory (once samples arrived)."""
        rate = lead.rate(self._end_wall or time.time()) if lead else 0.0
        if self.status in TERMINAL and lead:
            rate = lead.step_rate()  # over the steps: not the silence since the end
        metrics = {k: ys[-1] for k, (_, ys) in lead.metrics.items() if len(ys)} if lead else {}
        recovering = time.monotonic() - self._recovering_since if self._recovering_since else 0.0
        with self._lock:
            return hardware_items(self._samples, rate, metrics, self.elapsed,
                                  self._recovery_s + recovering)

    def show(self) -> None:
        """Display the live dashboard (with a one-line static fallback)."""
        self._handle = display_widget(
            self.widget, f"<p>jaxnb run <code>{html.escape(self.run_name)}</code>: "
            "live dashboard; the final plot and summary replace this line when it ends.</p>",
            updatable=True)

    def finish(self, status: str = "finished", message: str = "") -> None:
        """Set the final status and redraw; the live view keeps its plot and per-process table.

        A shown dashboard's static fallback (what papermill, nbconvert and GitHub
        show) becomes the summary table and the plot; an unshown one displays them.
        """
        self.set_status(status, message)
        self.refresh(force=True)
        png, summary = self.final_png(), self.summary_html()
        if self._handle is not None:
            static = summary + png_img(png, self._figure.css_size[0])
            self._handle.update(widget_bundle(self.widget, static, png, self.text()), raw=True)
        elif not in_ipython():  # a plain script: the summary as text
            print(self.text())
        else:
            display({"text/html": summary, "text/plain": self.text()}, raw=True)
            display(Image(data=png, format="png", width=self._figure.css_size[0]))

    def _stoppable(self) -> bool:
        return self.status in ("running", "recovering")

    def _clicked(self, _button: w.Button) -> None:
        if self._on_stop is None or self.status != "running":
            return
        self.set_status("stopping", "stop requested; every process stops at the same step")
        try:
            self._on_stop()
        except Exception as exc:
            self.set_status("running", f"stop failed: {exc}")
            raise

    def _replot(self, _change: Any = None) -> None:
        """Redraw now with the chosen smoothing and y scale (a control changed)."""
        self._show_plot(self._render_svg())

    def _show_plot(self, svg: str) -> None:
        self._plot.value = svg
        self._plot.layout.display = None
        self._drawn = True

    def _lead(self) -> ProcessReports | None:
        """Process 0 (whose history is the Result's), else the first one that reported."""
        with self._lock:
            return self._procs[min(self._procs)] if self._procs else None

    def _curves(self, drawing: bool = False) -> tuple[Curves, list[Curves], str]:
        """Process 0's curves, the other processes' (drawn faintly), and a note when there are none."""
        with self._lock:
            self._dirty = self._dirty and not drawing
            procs = [self._procs[i] for i in sorted(self._procs)]
            main: Curves = procs[0].curves() if procs else {}
            others: list[Curves] = [p.curves() for p in procs[1 : 1 + _MAX_FAINT]]
            if self.sizes and main:
                main = {**main, PROCESSES: self._size_track(procs[0].step)}
        empty = "no metrics were reported" if self.status in TERMINAL and not main else ""
        return main, others, empty

    def _log(self) -> bool | None:
        return {"auto": None, "linear": False, "log": True}[self._scale.value]

    def _render_svg(self) -> str:
        main, others, message = self._curves(drawing=True)
        panels = build_panels(main, others, set(NOT_PLOTTED), self._smoothing.value, self._log(),
                              max_points=SVG_POINTS)
        return render_svg(panels, message, markers=tuple(self.recoveries), resizes=tuple(self.resizes))

    def _steps_text(self, lead: ProcessReports | None) -> str:
        return steps_text(lead.step if lead else 0, self.total_steps)

    def _eta(self, lead: ProcessReports | None) -> str:
        """Time left at the recent rate, while running towards a known total ('' otherwise)."""
        if lead is None or not self.total_steps or self.status != "running":
            return ""
        rate = lead.rate(time.time())
        return duration_text(max(self.total_steps - lead.step, 0) / rate) if rate > 0 else ""

    def _update(self) -> None:
        lead, now = self._lead(), self._end_wall or time.time()
        step, rate = (lead.step, lead.rate(now)) if lead else (0, 0.0)
        color, total = _STYLE.get(self.status, ("#555", ""))[0], self.total_steps
        said = f"{self.status}:" if self.status == "recovering" and self.message else self.status
        self._title.value = (f"<b>{html.escape(self.run_name)}</b> — <b style='color:{color}'>"
                             f"{html.escape(said)}</b> {html.escape(self.message)}")
        self._bar.max = max(total or step, 1)
        self._bar.value = min(step, self._bar.max)
        self._bar.layout.display = None if total else "none"
        parts = [self._steps_text(lead), rate_text(rate), f"elapsed {duration_text(self.elapsed)}"]
        if self.max_failures:
            parts.append(self._recovered_text())
        if self.resizes:
            parts.append(f"{self.num_processes} processes")
        eta = self._eta(lead)
        if eta:
            parts.append(f"ETA {eta}")
        self._speed.value = " · ".join(parts)
        self._table.value = process_table(self.process_stats())
        self._hardware.value = "<small class='jaxnb-hardware'>" + "<br>".join(
            f"<b>{html.escape(k)}</b> {html.escape(v)}" for k, v in self._hardware_items(lead)) + "</small>"
        self._history.value = ("<small class='jaxnb-history'>" + history_text(lead) + "</small>"
                               if lead else "")
        self._ckpt.value = f"last checkpoint: <code>{html.escape(self.checkpoint or '—')}</code>"

