"""Metric curves as a PNG: one panel per metric family, drawn with matplotlib Agg.

No pyplot: a ``Figure`` with its own Agg canvas keeps no global state, so
nothing leaks. The live dashboard draws SVG (:mod:`.svg_plot`); this PNG is the static copy
that a notebook saved headless (papermill, nbconvert) shows in any viewer.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Curves = Mapping[str, tuple[np.ndarray, np.ndarray]]
"""Metric name -> (steps, values), for one process."""

_SPLIT = "train|training|val|valid|validation|eval|evaluation|test"
_PREFIX = re.compile(rf"^(?P<split>{_SPLIT})[_\-/. ]+(?P<base>.+)$", re.IGNORECASE)
_SUFFIX = re.compile(rf"^(?P<base>.+?)[_\-/. ]+(?P<split>{_SPLIT})$", re.IGNORECASE)
_LOG_HINTS = ("loss", "error", "perplexity", "ppl", "mse", "nll")
MAX_POINTS = 2000
MAX_PANELS = 16
SCALE = 2  # pixels per CSS pixel: sharp on HiDPI screens, downscaled cleanly on others


def split_name(name: str) -> tuple[str, str]:
    """``"val_loss"`` -> ``("loss", "val")``; ``"loss"`` -> ``("loss", "")``."""
    for pattern in (_PREFIX, _SUFFIX):
        match = pattern.match(name)
        if match:
            return match.group("base"), match.group("split").lower()
    return name, ""


def family(name: str) -> str:
    """``name`` without a train/val/eval/test prefix or suffix (``val_loss`` -> ``loss``)."""
    return split_name(name)[0]


def group_families(names: Iterable[str]) -> dict[str, list[str]]:
    """Metric names grouped by family, in order of first appearance; train before val."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(family(name), []).append(name)
    for members in groups.values():
        members.sort(key=lambda n: split_name(n)[1] not in ("", "train", "training"))
    return groups


def downsample(
    x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: per-bucket min and max, so spikes stay visible."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max_points // 2
    starts = np.linspace(0, n, buckets + 1).astype(np.intp)[:-1]
    counts = np.diff(np.append(starts, n))
    xm = np.add.reduceat(x, starts) / counts
    lo = np.fmin.reduceat(y, starts)
    hi = np.fmax.reduceat(y, starts)
    return np.repeat(xm, 2), np.column_stack([lo, hi]).ravel()


def smooth(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: a debiased exponential moving average (``weight`` in [0, 1))."""
    if weight <= 0 or len(y) < 2:
        return y
    out = np.empty(len(y))
    acc, debias = 0.0, 1.0
    for i, v in enumerate(y.tolist()):  # 2000 points at most: a Python loop is ~0.3 ms
        if math.isfinite(v):
            acc = weight * acc + (1 - weight) * v
            debias *= weight
        out[i] = acc / (1 - debias) if debias < 1 else v
    return out


def last_text(value: float) -> str:
    """A metric's last value, short: ``0.0123``, ``1.23e+04``."""
    return f"{value:.4g}"


def _use_log(name: str, values: Sequence[np.ndarray]) -> bool:
    if not any(hint in name.lower() for hint in _LOG_HINTS):
        return False
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.empty(0)
    return finite.size > 1 and finite.min() > 0 and finite.max() / finite.min() > 1e3


def _fixed_margins(fig: Figure, cols: int, rows: int, header: float) -> None:
    """Margins in inches (much cheaper than ``tight_layout``, which measures every label)."""
    width, height = fig.get_size_inches()
    left, right, bottom, top = 0.7, 0.15, 0.45, 0.3 + header
    axes_w = (width - left - right - 0.75 * (cols - 1)) / cols
    axes_h = (height - bottom - top - 0.75 * (rows - 1)) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height, wspace=0.75 / axes_w, hspace=0.75 / axes_h)


class MetricsFigure:
    """One reusable Agg figure that renders metric curves to PNG bytes.

    While the panels stay the same, redraws only replace line data (creating
    axes and ticks is most of matplotlib's cost).
    """

    def __init__(self, panel_size: tuple[float, float] = (4.0, 2.6), dpi: int = 80) -> None:
        self._fig = Figure(dpi=dpi * SCALE)
        FigureCanvasAgg(self._fig)
        self._panel, self._dpi = panel_size, dpi
        self._key: Hashable = None

    @property
    def css_size(self) -> tuple[int, int]:
        """The last PNG's size in CSS pixels (its pixel size / ``SCALE``): show it at this size."""
        width, height = self._fig.get_size_inches()
        return round(width * self._dpi), round(height * self._dpi)

    def render(
        self,
        main: Curves,
        others: Sequence[Curves] = (),
        skip: Iterable[str] = (),
        message: str = "",
        smoothing: float = 0.0,
        log: bool | None = None,
        markers: Sequence[float] = (),
        resizes: Sequence[tuple[int, int, int]] = (),
    ) -> bytes:
        """PNG of ``main``'s curves (``others`` faintly), one panel per family.

        ``smoothing`` (0 to 0.99) draws an exponential moving average over the
        raw curve (drawn faintly); ``log`` forces a log y axis on (True) or off
        (False); None picks it for loss-like metrics spanning 1000x. Legends
        give each curve's last value. ``markers``: steps drawn as dashed lines; ``resizes``:
        (step, old, new) process counts, drawn as dotted lines (orange: shrank, green: grew).
        """
        panels = build_panels(main, others, set(skip), smoothing, log)
        key = (message, tuple(markers), tuple(resizes),
               [(p.family, p.log, [s[:3] for s in p.series]) for p in panels])
        if key != self._key:
            self._build(panels, message, markers, resizes)
            self._key = key
        else:
            for ax, panel in zip(self._fig.axes, panels, strict=False):
                for line, series in zip(ax.lines[:len(panel.series)], panel.series, strict=True):
                    line.set_data(series.x, series.y)
                ax.relim()
                ax.autoscale_view()
        for ax, panel in zip(self._fig.axes, panels, strict=False):
            legend = ax.get_legend()
            labelled = [s for s in panel.series if s.label is not None]
            if legend is not None:
                for text, series in zip(legend.get_texts(), labelled, strict=False):
                    text.set_text(f"{series.label}  {last_text(series.last)}")
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png")
        return buf.getvalue()

    def _build(self, panels: list[Panel], message: str, markers: Sequence[float] = (),
               resizes: Sequence[tuple[int, int, int]] = ()) -> None:
        fig = self._fig
        fig.clear()
        shown = panels[:MAX_PANELS]
        if len(panels) > len(shown):
            message = f"{message}  (+{len(panels) - len(shown)} more metric families)".strip()
        cols = max(1, min(3, len(shown)))
        rows = max(1, math.ceil(len(shown) / cols))
        header = 0.3 * bool(message)
        fig.set_size_inches(self._panel[0] * cols, self._panel[1] * rows + header)
        if not shown:
            fig.text(0.5, 0.5, message or "no metrics reported yet", ha="center", va="center")
            return
        _fixed_margins(fig, cols, rows, header)
        if message:
            fig.text(0.01, 0.99, message, ha="left", va="top", fontsize=9)
        for i, panel in enumerate(shown):
            ax = fig.add_subplot(rows, cols, i + 1)
            for s in panel.series:
                faint = s.label is None
                ax.plot(s.x, s.y, color=s.color, alpha=0.25 if faint else 1.0,
                        linewidth=0.8 if faint else 1.4, marker="o" if s.marker else None,
                        markersize=3, label=s.label)
            for m in markers:
                ax.axvline(m, color="#d62728", linestyle="--", linewidth=0.8)
            for step, old, new in resizes:
                ax.axvline(step, color="#e67e00" if new < old else "#2ca02c", linestyle=":",
                           linewidth=1.2)
            if panel.log:
                ax.set_yscale("log")
            ax.set_title(panel.family, fontsize=10)
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, frameon=False, handlelength=1.2)


class Series(NamedTuple):
    label: str | None  # None: another process's faint copy
    color: str
    marker: bool
    x: np.ndarray
    y: np.ndarray
    last: float = math.nan  # the raw last value (labelled series only)


class Panel(NamedTuple):
    family: str
    log: bool
    series: list[Series]


def build_panels(
    main: Curves, others: Sequence[Curves], skip: set[str], smoothing: float = 0.0,
    log: bool | None = None, max_points: int = MAX_POINTS,
) -> list[Panel]:
    """What to draw: one panel per family, each other process's copy before process 0's.

    With smoothing, process 0's raw curve is drawn faintly under its smoothed one.
    """
    panels = []
    for fam, names in group_families(n for n in main if n not in skip).items():
        series = []
        for j, name in enumerate(names):
            color = f"C{j % 10}"
            for extra in others:
                if name in extra:
                    series.append(Series(None, color, False, *downsample(*extra[name], max_points)))
            x, y = main[name]
            xs, ys = downsample(x, y, max_points)
            last = float(y[-1]) if len(y) else math.nan
            if smoothing > 0 and len(x) > 1:
                series.append(Series(None, color, False, xs, ys))
                ys = smooth(ys, smoothing)
            series.append(Series(name, color, len(x) <= 50, xs, ys, last))
        use_log = _use_log(fam, [main[n][1] for n in names]) if log is None else log
        panels.append(Panel(fam, use_log and _positive(main, names), series))
    return panels


def _positive(main: Curves, names: Sequence[str]) -> bool:
    """A log axis only makes sense when some values are positive."""
    return any(np.any(np.asarray(main[n][1]) > 0) for n in names)
