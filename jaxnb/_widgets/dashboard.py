"""Live training dashboard: status, progress, metric curves, per-process rates, Stop."""

from __future__ import annotations

import html
import math
import statistics
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as w
import numpy as np
from IPython.display import HTML, Image, display

from ._display import display_widget
from .plots import MetricsFigure

STEP_NAMES = ("step", "epoch", "iteration")  # the x axis; not plotted as curves
TERMINAL = ("finished", "failed", "interrupted")
_STYLE = {"running": ("#1f77b4", ""), "stopping": ("#e67e00", "warning"),
          "finished": ("#2ca02c", "success"), "failed": ("#d62728", "danger"),
          "interrupted": ("#e67e00", "warning")}  # status -> (colour, progress bar style)
_WINDOW_S = 5.0  # steps/s is measured over about this much engine time
_GRACE_S = 2.0  # silence longer than this pulls a process's steps/s down
_MIN_INTERVAL_S = 0.25
_PLOT_SHARE = 20  # redraw the plot at most every 20x the time one drawing takes
_MAX_ROWS, _MAX_FAINT = 16, 7
_TABLE = "<table style='border-collapse:collapse;font-size:12px'>{}</table>"
_CELL = "<{t} style='padding:1px 10px;text-align:{a}'>{v}</{t}>"


@dataclass
class _Proc:
    """What the dashboard keeps of one process's reports."""

    count: int = 0
    first: tuple[float, int] = (0.0, 0)
    step: int = 0
    time: float = 0.0
    offset: float = math.inf  # min(kernel arrival - engine time): maps engine clock to ours
    window: deque[tuple[float, int]] = field(default_factory=deque)
    metrics: dict[str, tuple[array, array]] = field(default_factory=dict)

    def add(self, rec: dict[str, Any], arrival: float) -> None:
        t, step = float(rec["time"]), int(rec["step"])
        self.first = self.first if self.count else (t, step)
        self.count, self.step, self.time = self.count + 1, step, t
        self.offset = min(self.offset, arrival - t)
        self.window.append((t, step))
        while len(self.window) > 2 and self.window[1][0] <= t - _WINDOW_S:
            self.window.popleft()
        for name, value in (rec.get("metrics") or {}).items():
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            xs, ys = self.metrics.setdefault(name, (array("d"), array("d")))
            xs.append(step)
            ys.append(v)

    def age(self, now: float) -> float:
        """Seconds since the last report was made (engine clock offset removed)."""
        return max(0.0, now - self.offset - self.time)

    def rate(self, now: float) -> float:
        """Steps/s over the last few seconds; falls while the process is silent."""
        t0, s0 = self.window[0]
        age = self.age(now)
        end = self.time + (age if age > _GRACE_S else 0.0)
        return max(0.0, (self.step - s0) / (end - t0)) if end > t0 else 0.0

    def mean_rate(self) -> float:
        t0, s0 = self.first
        return max(0.0, (self.step - s0) / (self.time - t0)) if self.time > t0 else 0.0

    def curves(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for name, (xs, ys) in self.metrics.items():
            y = np.array(ys, dtype=float)
            y[np.isinf(y)] = np.nan
            out[name] = (np.array(xs, dtype=float), y)
        return out


class Dashboard:
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
        self._on_stop = on_stop
        self._procs: dict[int, _Proc] = {}
        self._lock, self._render_lock = threading.RLock(), threading.Lock()
        self._figure = MetricsFigure()
        self._start, self._end, self._end_wall = time.monotonic(), 0.0, 0.0
        self._last_refresh, self._last_plot = -math.inf, -math.inf
        self._plot_interval = _MIN_INTERVAL_S
        self._dirty, self._png, self._shown = True, b"", False
        self._title, self._speed, self._table, self._ckpt = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        self._bar = w.IntProgress(min=0, max=1, layout=w.Layout(width="40%"))
        self._image = w.Image(format="png", layout=w.Layout(display="none", max_width="100%"))
        self._stop = w.Button(description="Stop", icon="stop", button_style="danger",
                              tooltip="Ask every process to stop at the same step")
        self._stop.on_click(self._clicked)
        if on_stop is None:
            self._stop.disabled, self._stop.layout.display = True, "none"
        self._box = w.VBox([w.HBox([self._title, self._stop]), w.HBox([self._bar, self._speed]),
                            self._image, self._table, self._ckpt])
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
                    rec["process"], _Proc())
                proc.add(rec, arrival)
                if rec.get("checkpoint"):
                    self.checkpoint = str(rec["checkpoint"])
            self._dirty = self._dirty or bool(records)

    def refresh(self, force: bool = False) -> bool:
        """Update, at most a few times a second unless ``force``; True if it updated.

        Progress, rates and status update every time; the plot is redrawn less
        often when drawing it is slow, so that it takes at most 1/_PLOT_SHARE
        of one core (on a small machine that core is the training's).
        """
        start = time.monotonic()
        if not force and start - self._last_refresh < _MIN_INTERVAL_S:
            return False
        self._last_refresh = start
        self._update()
        due = force or start - self._last_plot >= self._plot_interval
        if (self._dirty or not self._png) and due:
            self._last_plot = start
            self._image.value = self._render()
            self._image.layout.display = None
            self._plot_interval = max(_MIN_INTERVAL_S, _PLOT_SHARE * (time.monotonic() - start))
        return True

    def set_status(self, status: str, message: str = "") -> None:
        """Set the run status (running/stopping/finished/failed/interrupted)."""
        self.status, self.message = status, message
        if status in TERMINAL and not self._end:
            self._end, self._end_wall = time.monotonic(), time.time()
        elif status == "running":
            self._end = self._end_wall = 0.0
        self._stop.disabled = self._on_stop is None or status != "running"
        self._bar.bar_style = _STYLE.get(status, ("", ""))[1]
        self._update()

    def set_checkpoint(self, path: str | None) -> None:
        """Record the latest checkpoint path."""
        self.checkpoint = path
        self._update()

    def final_png(self) -> bytes:
        """PNG bytes of the metric curves as they are now."""
        return self._render() if self._dirty or not self._png else self._png

    def process_stats(self) -> list[dict[str, Any]]:
        """Per process: last step, steps/s (recent and mean), last report age, flag."""
        now = self._end_wall or time.time()  # frozen once the run has ended
        with self._lock:
            procs = dict(self._procs)
        median = statistics.median(p.rate(now) for p in procs.values()) if procs else 0.0
        rows = []
        for i in sorted(set(range(self.num_processes)) | set(procs)):
            p = procs.get(i)
            row = {"process": i, "step": p and p.step, "steps_per_s": p and p.rate(now),
                   "mean_steps_per_s": p and p.mean_rate(), "age_s": p and p.age(now),
                   "reports": p.count if p else 0, "flag": "" if p else "waiting"}
            if p and self.status == "running":
                gap = (p.time - p.first[0]) / max(p.count - 1, 1)
                row["flag"] = ("silent" if row["age_s"] > max(15.0, 5 * gap) else
                               "slow" if len(procs) > 1 and row["steps_per_s"] < 0.7 * median
                               else "")
            rows.append(row)
        return rows

    def summary_html(self) -> str:
        """Static HTML table: run, status, steps, elapsed, final metrics, checkpoint, rates."""
        lead = self._lead()
        items = [("run", self.run_name),
                 ("status", self.status + (f" — {self.message}" if self.message else "")),
                 ("steps", self._steps_text(lead)), ("elapsed", _duration(self.elapsed))]
        items += [(k, f"{ys[-1]:.6g}") for k, (_, ys) in (lead.metrics if lead else {}).items()]
        rows = self.process_stats()
        rates = [f"p{r['process']}: {_rate(r['mean_steps_per_s'])}" for r in rows[:8]]
        rates += [f"… {len(rows) - 8} more"] if len(rows) > 8 else []
        items += [("checkpoint", self.checkpoint or "—"), ("steps/s", " · ".join(rates))]
        body = "".join(_row([html.escape(k), html.escape(v)]) for k, v in items)
        return f"<div class='jaxnb-summary'>{_TABLE.format(body)}</div>"

    def show(self) -> None:
        """Display the live dashboard (with a one-line static fallback)."""
        display_widget(self.widget, f"<p>jaxnb run <code>{html.escape(self.run_name)}</code>: "
                       "live dashboard; the final plot and summary follow when it ends.</p>")
        self._shown = True

    def finish(self, status: str = "finished", message: str = "") -> None:
        """Set the final status, redraw, and display the plot (PNG) and summary (HTML)."""
        self.set_status(status, message)
        self.refresh(force=True)
        if self._shown:  # the static copy below replaces the live plot and table
            for part in (self._image, self._table, self._ckpt):
                part.layout.display = "none"
        display(HTML(self.summary_html()))
        display(Image(data=self.final_png(), format="png"))

    def _clicked(self, _button: w.Button) -> None:
        if self._on_stop is None or self.status != "running":
            return
        self.set_status("stopping", "stop requested; every process stops at the same step")
        try:
            self._on_stop()
        except Exception as exc:
            self.set_status("running", f"stop failed: {exc}")
            raise

    def _lead(self) -> _Proc | None:
        """Process 0 (whose history is the Result's), else the first one that reported."""
        with self._lock:
            return self._procs[min(self._procs)] if self._procs else None

    def _render(self) -> bytes:
        with self._render_lock:
            with self._lock:
                self._dirty = False
                procs = [self._procs[i] for i in sorted(self._procs)]
                main = procs[0].curves() if procs else {}
                others = [p.curves() for p in procs[1 : 1 + _MAX_FAINT]]
            empty = "no metrics were reported" if self.status in TERMINAL and not main else ""
            self._png = self._figure.render(main, others, skip=STEP_NAMES, message=empty)
            return self._png

    def _steps_text(self, lead: _Proc | None) -> str:
        step = lead.step if lead else 0
        return f"{step} / {self.total_steps}" if self.total_steps else str(step)

    def _update(self) -> None:
        lead, now = self._lead(), self._end_wall or time.time()
        step, rate = (lead.step, lead.rate(now)) if lead else (0, 0.0)
        color, total = _STYLE.get(self.status, ("#555", ""))[0], self.total_steps
        self._title.value = (f"<b>{html.escape(self.run_name)}</b> — <b style='color:{color}'>"
                             f"{html.escape(self.status)}</b> {html.escape(self.message)}")
        self._bar.max = max(total or step, 1)
        self._bar.value = min(step, self._bar.max)
        self._bar.layout.display = None if total else "none"
        parts = [self._steps_text(lead), _rate(rate), f"elapsed {_duration(self.elapsed)}"]
        if total and rate > 0 and self.status == "running":
            parts.append(f"ETA {_duration(max(total - step, 0) / rate)}")
        self._speed.value = " · ".join(parts)
        self._table.value = _process_table(self.process_stats())
        self._ckpt.value = f"last checkpoint: <code>{html.escape(self.checkpoint or '—')}</code>"


def _process_table(rows: list[dict[str, Any]]) -> str:
    """HTML table of ``process_stats`` rows; with many processes, the stragglers only."""
    more = ""
    if len(rows) > _MAX_ROWS:
        more = f"<p>… {len(rows) - _MAX_ROWS} more processes, all further ahead</p>"
        rows = sorted(rows, key=lambda r: (r["step"] is not None, r["step"] or 0))[:_MAX_ROWS]
    head = _row(["process", "last step", "steps/s", "last report", ""], head=True)
    body = "".join(_row([
        str(r["process"]), "—" if r["step"] is None else str(r["step"]),
        _rate(r["steps_per_s"]),
        "—" if r["age_s"] is None else f"{_duration(r['age_s'], 1)} ago",
        f"<b style='color:#d62728'>{r['flag']}</b>" if r["flag"] else ""]) for r in rows)
    return _TABLE.format(head + body) + more


def _row(cells: list[str], head: bool = False) -> str:
    """A row of already-escaped cells; the first cell (every cell in a head) is a <th>."""
    return "<tr>{}</tr>".format("".join(
        _CELL.format(t="th" if head or i == 0 else "td", a="left" if i == 0 else "right", v=v)
        for i, v in enumerate(cells)))


def _duration(seconds: float, digits: int = 0) -> str:
    if seconds < 60 and digits:
        return f"{seconds:.{digits}f} s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rate(rate: float | None) -> str:
    if not rate:
        return "— steps/s"
    return f"{rate:.3g} steps/s" if rate >= 1 else f"{1 / rate:.3g} s/step"
