"""Metric panels as inline SVG: drawn by the browser, sharp at any pixel ratio, cheap to make.

The kernel only formats coordinates (a few ms for thousands of points); the page
draws them. One ``<svg>`` per metric family, laid out side by side at its own size.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import LogLocator, MaxNLocator

from .plots import MAX_PANELS, Panel, last_text

WIDTH, HEIGHT = 330, 220  # one panel, CSS pixels
MAX_POINTS = 600  # per curve: two (min and max) per horizontal pixel of the plot area
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 12, 24, 30
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # matplotlib's C0..C9
_FONT = "font-family:sans-serif;font-size:10px;fill:#333"


def colour(name: str) -> str:
    """Matplotlib's ``C3`` -> its hex colour; anything else unchanged."""
    return COLOURS[int(name[1:]) % 10] if name[:1] == "C" and name[1:].isdigit() else name


def render_svg(panels: Sequence[Panel], message: str = "", markers: Sequence[float] = (),
               resizes: Sequence[tuple[int, int, int]] = ()) -> str:
    """HTML holding one SVG per panel (at most ``MAX_PANELS``), or ``message`` when there are none.

    ``markers``: steps drawn as dashed vertical lines (where a recovered run resumed);
    ``resizes``: (step, old, new) process counts, drawn as dotted lines (orange where the group
    shrank, green where it grew; classes ``jaxnb-shrink`` and ``jaxnb-grow``).
    """
    shown = list(panels)[:MAX_PANELS]
    note = f"<div style='font-size:12px'>{html.escape(message)}</div>" if message else ""
    if len(panels) > len(shown):
        note += f"<div style='font-size:12px'>+{len(panels) - len(shown)} more metric families</div>"
    if not shown:
        return note or "<div style='font-size:12px;color:#666'>no metrics reported yet</div>"
    return note + "<div class='jaxnb-plot' style='display:flex;flex-wrap:wrap;gap:4px 16px'>" + "".join(
        _panel_svg(p, markers, resizes) for p in shown) + "</div>"


def _panel_svg(panel: Panel, markers: Sequence[float] = (),
               resizes: Sequence[tuple[int, int, int]] = ()) -> str:
    xs = [s.x for s in panel.series if len(s.x)]
    ys = [s.y[np.isfinite(s.y)] for s in panel.series if len(s.y)]
    log = panel.log
    if log:
        ys = [y[y > 0] for y in ys]
    if not xs or not any(len(y) for y in ys):
        return _frame(panel.family, "", "", "no finite values")
    x_lo, x_hi = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
    y_all = np.concatenate([y for y in ys if len(y)])
    y_lo, y_hi = float(y_all.min()), float(y_all.max())
    fy = np.log10 if log else (lambda v: v)
    t_lo, t_hi = (math.log10(y_lo), math.log10(y_hi)) if log else (y_lo, y_hi)
    if t_hi == t_lo:
        t_lo, t_hi = t_lo - 0.5, t_hi + 0.5
    pad = (t_hi - t_lo) * 0.05
    t_lo, t_hi = t_lo - pad, t_hi + pad
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    pw, ph = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def px(x: np.ndarray) -> np.ndarray:
        return _LEFT + (x - x_lo) / (x_hi - x_lo) * pw

    def py(t: np.ndarray) -> np.ndarray:
        return _TOP + (t_hi - t) / (t_hi - t_lo) * ph

    grid = []
    for x in MaxNLocator(6, integer=True).tick_values(x_lo, x_hi):
        if x_lo <= x <= x_hi:
            X = float(px(np.float64(x)))
            grid.append(f"<line x1='{X:.1f}' x2='{X:.1f}' y1='{_TOP}' y2='{_TOP + ph}' stroke='#eee'/>"
                        f"<text x='{X:.1f}' y='{_TOP + ph + 12}' text-anchor='middle' style='{_FONT}'>"
                        f"{x:g}</text>")
    y_ticks = (np.log10(LogLocator(numticks=6).tick_values(y_lo, y_hi)) if log
               else MaxNLocator(5).tick_values(t_lo, t_hi))
    for t in y_ticks:
        if t_lo <= t <= t_hi:
            Y = float(py(np.float64(t)))
            label = f"{10 ** t:g}" if log else f"{t:.4g}"
            grid.append(f"<line x1='{_LEFT}' x2='{_LEFT + pw}' y1='{Y:.1f}' y2='{Y:.1f}' stroke='#eee'/>"
                        f"<text x='{_LEFT - 4}' y='{Y + 3:.1f}' text-anchor='end' style='{_FONT}'>"
                        f"{label}</text>")
    for m in markers:
        if x_lo <= m <= x_hi:
            X = float(px(np.float64(m)))
            grid.append(f"<line class='jaxnb-recovery' x1='{X:.1f}' x2='{X:.1f}' y1='{_TOP}' "
                        f"y2='{_TOP + ph}' stroke='#d62728' stroke-dasharray='4 3'>"
                        f"<title>recovered: resumed from step {m:g}</title></line>")
    for step, old, new in resizes:
        if x_lo <= step <= x_hi:
            X = float(px(np.float64(step)))
            kind, colour_ = ("shrink", "#e67e00") if new < old else ("grow", "#2ca02c")
            grid.append(f"<line class='jaxnb-{kind}' x1='{X:.1f}' x2='{X:.1f}' y1='{_TOP}' "
                        f"y2='{_TOP + ph}' stroke='{colour_}' stroke-width='1.5' "
                        f"stroke-dasharray='1 2'><title>{old} → {new} processes at step {step}"
                        "</title></line>")
    lines: list[str] = []
    legend: list[str] = []
    for s in panel.series:
        keep = np.isfinite(s.y) & ((s.y > 0) if log else True)
        if not keep.any():
            continue
        sx, sy = px(s.x[keep]), py(fy(s.y[keep]))
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(sx.tolist(), sy.tolist(), strict=True))
        c = colour(s.color)
        faint = s.label is None
        tip = "" if faint else (f"<title>{html.escape(s.label or '')}: {last_text(s.last)} "
                                f"at step {float(s.x[-1]):g}</title>")  # shown on hover
        lines.append(f"<polyline points='{points}' fill='none' stroke='{c}' "
                     f"stroke-width='{0.8 if faint else 1.5}' opacity='{0.3 if faint else 1}'>"
                     f"{tip}</polyline>")
        if s.marker and not faint:
            lines.append("".join(f"<circle cx='{a:.1f}' cy='{b:.1f}' r='2' fill='{c}'/>"
                                 for a, b in zip(sx.tolist(), sy.tolist(), strict=True)))
        if not faint:
            row = len(legend)
            legend.append(f"<g><rect x='{_LEFT + pw - 118}' y='{_TOP + 6 + 13 * row}' width='10' height='3' "
                          f"fill='{c}'/><text x='{_LEFT + pw - 104}' y='{_TOP + 10 + 13 * row}' "
                          f"style='{_FONT}'>{html.escape(s.label or '')}  {last_text(s.last)}</text></g>")
    return _frame(panel.family + (" (log)" if log else ""), "".join(grid), "".join(lines) + "".join(legend))


def _frame(title: str, grid: str, body: str, note: str = "") -> str:
    pw, ph = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    extra = (f"<text x='{_LEFT + pw / 2}' y='{_TOP + ph / 2}' text-anchor='middle' style='{_FONT}'>"
             f"{html.escape(note)}</text>") if note else ""
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' "
            f"viewBox='0 0 {WIDTH} {HEIGHT}' style='background:white'>"
            f"<text x='{_LEFT + pw / 2}' y='15' text-anchor='middle' "
            f"style='font-family:sans-serif;font-size:12px;fill:#222'>{html.escape(title)}</text>"
            f"{grid}<rect x='{_LEFT}' y='{_TOP}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>"
            f"{body}{extra}"
            f"<text x='{_LEFT + pw / 2}' y='{HEIGHT - 4}' text-anchor='middle' style='{_FONT}'>step</text>"
            "</svg>")
