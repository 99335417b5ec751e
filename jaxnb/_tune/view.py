"""The search's one live widget: trials table, every trial's metric curve, best-so-far, Stop.

Core ipywidgets only; curves are inline SVG (``svg_plot``) drawn by the page.
Headless (papermill, nbconvert) the final table and a PNG replace the fallback.
"""

from __future__ import annotations

import html
import io
import math
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import ipywidgets as w
import numpy as np

from jaxnb._widgets._display import display_widget, png_img, widget_bundle
from jaxnb._widgets.plots import Panel, Series
from jaxnb._widgets.run_text import TABLE, duration_text, row_html
from jaxnb._widgets.stop_control import StopControl
from jaxnb._widgets.svg_plot import render_svg

MIN_INTERVAL_S = 0.2
_CPU_SHARE = 20  # after each redraw, wait 20x the CPU time it took
_COLOURS = {"RUNNING": "#1f77b4", "COMPLETE": "#2ca02c", "PRUNED": "#e67e00", "FAIL": "#d62728"}
MAX_FAINT = 50  # trials drawn besides the best and the running one


@dataclass
class TrialRow:
    """What the view keeps of one trial."""

    number: int
    params: dict[str, Any]
    state: str = "RUNNING"
    value: float | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0
    steps: array = field(default_factory=lambda: array("d"))
    values: array = field(default_factory=lambda: array("d"))
    last_step: int = 0  # the last step the trial reported (any metric)
    took: float | None = None  # seconds, for trials of an earlier session
    recoveries: int = 0  # restarts after a dead process (--max-failures)

    @property
    def seconds(self) -> float:
        if self.took is not None:
            return self.took
        return (self.ended or time.monotonic()) - self.started


class TuneView(StopControl):
    """Live view of a search: ``trial_started``, ``add``, ``trial_ended``, ``refresh``, ``finish``."""

    def __init__(self, study: str, metric: str, mode: str, trials: int,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.study, self.metric, self.mode, self.total = study, metric, mode, trials
        self.status, self.message = "running", ""
        self.rows: dict[int, TrialRow] = {}
        self._on_stop = on_stop
        self._lock = threading.RLock()
        self._dirty, self._last, self._interval = True, -math.inf, MIN_INTERVAL_S
        self._handle: Any = None
        self._title, self._table, self._plot = w.HTML(), w.HTML(), w.HTML()
        self._stop = w.Button(description="Stop search", icon="stop", button_style="danger",
                              tooltip="End the search after the current trial")
        self._stop.on_click(self._clicked)
        if on_stop is None:
            self._stop.layout.display = "none"
        self._box = w.VBox([w.HBox([self._title, self._stop]), self._plot, self._table])
        self._box.add_class("jaxnb-tune")
        self._draw()

    @property
    def widget(self) -> w.VBox:
        """The live ipywidgets layout."""
        return self._box

    @property
    def stop_button(self) -> w.Button:
        """The **Stop search** button."""
        return self._stop

    # ---- what the search tells the view -------------------------------------------------

    def show(self) -> None:
        """Display the live view (with a one-line static fallback until it ends)."""
        self._handle = display_widget(
            self._box, f"<p>jaxnb search <code>{html.escape(self.study)}</code>: live view; the "
            "trials table and plot replace this line when it ends.</p>", updatable=True)

    def trial_started(self, number: int, params: dict[str, Any]) -> None:
        with self._lock:
            self.rows[number] = TrialRow(number, dict(params))
            self._dirty = True

    def add(self, number: int, step: float, value: float) -> None:
        """One report of the metric (O(1); does not redraw)."""
        with self._lock:  # the drawing thread copies the arrays under the same lock
            row = self.rows[number]
            row.steps.append(step)
            row.values.append(value)
            self._dirty = True

    def rewind(self, number: int, step: int | None, recoveries: int) -> None:
        """Trial ``number`` was resumed from ``step`` after its ``recoveries``-th recovery:
        its curve keeps only the reports up to that step."""
        with self._lock:
            row = self.rows[number]
            keep = sum(1 for s in row.steps if step is not None and s <= step)
            del row.steps[keep:], row.values[keep:]
            row.recoveries = recoveries
            self._dirty = True

    def saw_step(self, number: int, step: int) -> None:
        """The trial reported ``step`` (any metric; O(1))."""
        self.rows[number].last_step = step

    def trial_ended(self, number: int, state: str, value: float | None,
                    seconds: float | None = None) -> None:
        with self._lock:
            row = self.rows[number]
            row.state, row.value, row.ended, row.took = state, value, time.monotonic(), seconds
            self._dirty = True
        self.refresh(force=True)

    def set_status(self, status: str, message: str = "") -> None:
        self.status, self.message = status, message
        self._update_stop()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> bool:
        """Redraw if due (a small share of one core at most); True if it did."""
        start, cpu = time.monotonic(), time.thread_time()
        if not force and (start - self._last < self._interval or not self._dirty):
            return False
        self._last = start
        self._draw()
        self._interval = max(MIN_INTERVAL_S, _CPU_SHARE * (time.thread_time() - cpu))
        return True

    def finish(self, status: str = "finished", message: str = "") -> None:
        """Final status; the static fallback becomes the trials table and a PNG of the curves."""
        self.set_status(status, message)
        png = self.png()
        if self._handle is not None:
            static = self._title.value + self.table_html() + png_img(png)
            self._handle.update(widget_bundle(self._box, static, png), raw=True)

    # ---- what it draws --------------------------------------------------------------------

    def best(self) -> TrialRow | None:
        done = [r for r in list(self.rows.values()) if r.state == "COMPLETE" and r.value is not None]
        if not done:
            return None
        return (min if self.mode == "min" else max)(done, key=lambda r: cast(float, r.value))

    def table_html(self) -> str:
        """Trials table: number, parameters, metric, state, steps, time."""
        with self._lock:
            rows = [(r, r.values[-1] if r.values else None, r.last_step) for r in self.rows.values()]
        best = self.best()
        head = row_html(["trial", "parameters", html.escape(self.metric), "state", "steps", "time"],
                        head=True)
        body = []
        for row, last, steps in sorted(rows, key=lambda t: t[0].number):
            value = row.value if row.value is not None else last
            mark = " ★" if row is best else ""
            body.append(row_html([
                f"{row.number}{mark}", html.escape(_params_text(row.params)),
                "—" if value is None else f"{value:.5g}",
                f"<span style='color:{_COLOURS.get(row.state, '#333')}'>{row.state}</span>"
                + (f" (recovered {row.recoveries}×)" if row.recoveries else ""),
                str(steps), duration_text(row.seconds, 1)]))
        return TABLE.format(head + "".join(body))

    def panels(self) -> list[Panel]:
        """The metric of every trial (best and running labelled), and best-so-far by trial."""
        with self._lock:
            rows = [TrialRow(r.number, r.params, r.state, r.value, r.started, r.ended,
                             array("d", r.steps), array("d", r.values), r.last_step, r.took)
                    for r in sorted(self.rows.values(), key=lambda r: r.number)]
        best = next((r for r in rows if r.number == getattr(self.best(), "number", None)), None)
        faint = [r for r in rows if r is not best and r.state != "RUNNING" and len(r.steps)]
        series = [Series(None, "#7f7f7f", False, _np(r.steps), _np(r.values))
                  for r in faint[-MAX_FAINT:]]
        for row in rows:
            if row.state == "RUNNING" and len(row.steps):
                series.append(Series(f"trial {row.number} (running)", "C0", False, _np(row.steps),
                                     _np(row.values), row.values[-1]))
        if best is not None and len(best.steps):
            series.append(Series(f"best: trial {best.number}", "C3", False, _np(best.steps),
                                 _np(best.values), best.values[-1]))
        panels = [Panel(f"{self.metric} by step, every trial", False, series)] if series else []
        xs, ys = self._best_so_far(rows)
        if xs:
            panels.append(Panel(f"best {self.metric} so far, by trial", False, [
                Series("best so far", "C2", True, np.asarray(xs, float), np.asarray(ys, float),
                       ys[-1])]))
        return panels

    def png(self) -> bytes:
        """The same two panels drawn with matplotlib (for static viewers)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        panels = self.panels()
        fig = Figure(figsize=(4.2 * max(1, len(panels)), 2.8), dpi=100)
        FigureCanvasAgg(fig)
        for i, panel in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            for s in panel.series:
                faint = s.label is None
                ax.plot(s.x, s.y, color=s.color, alpha=0.35 if faint else 1.0,
                        linewidth=0.8 if faint else 1.6, marker="o" if s.marker else None,
                        markersize=3, label=s.label)
            ax.set_title(panel.family, fontsize=9)
            ax.set_xlabel("trial" if i else "step", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
            if any(s.label for s in panel.series):
                ax.legend(fontsize=7, frameon=False)
        if not panels:
            fig.text(0.5, 0.5, f"no trial reported {self.metric}", ha="center")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    def _best_so_far(self, rows: list[TrialRow]) -> tuple[list[int], list[float]]:
        xs, ys, best = [], [], None
        better = (lambda a, b: a < b) if self.mode == "min" else (lambda a, b: a > b)
        for row in rows:
            if row.state == "COMPLETE" and row.value is not None and (
                    best is None or better(row.value, best)):
                best = row.value
            if best is not None and row.state != "RUNNING":
                xs.append(row.number)
                ys.append(best)
        return xs, ys

    def _draw(self) -> None:
        self._dirty = False
        done = sum(1 for r in list(self.rows.values()) if r.state != "RUNNING")
        colour = {"running": "#1f77b4", "stopping": "#e67e00", "failed": "#d62728"}.get(
            self.status, "#2ca02c")
        best = self.best()
        best_text = (f" · best {html.escape(self.metric)} {best.value:.5g} (trial {best.number})"
                     if best is not None and best.value is not None else "")
        self._title.value = (
            f"<b>{html.escape(self.study)}</b> — <b style='color:{colour}'>"
            f"{html.escape(self.status)}</b> {html.escape(self.message)} · {done} / {self.total} "
            f"trials{best_text}")
        self._table.value = self.table_html()
        self._plot.value = render_svg(self.panels(), "")

    def _stoppable(self) -> bool:
        return self.status == "running"

    def _clicked(self, _button: Any) -> None:
        if self._on_stop is not None and self.status == "running":
            self.set_status("stopping", "the search ends after the current trial")
            self._on_stop()


def _np(values: array) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)  # a private copy: nobody appends to it


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())
