"""A static timeline picture of a profile (matplotlib, imported only when drawing).

Two rows per process over the last few steps every process recorded: its steps (one bar
each, labelled), and what its devices do (compute in blue, collectives in orange; gaps
are host time). Times are on the merged (aligned) axis, in µs.
"""

from __future__ import annotations

import io
from typing import Any

SHOWN_STEPS = 3


def picture(parts: dict[int, dict[str, Any]], hosts: dict[int, str],
            straggler: int | None = None) -> bytes | None:
    """PNG bytes, from each process's ``{"steps": [(step, start, end)], "ops": [(start, end,
    is_collective)]}``; ``None`` when there is nothing to draw."""
    processes = sorted(parts)
    if not processes:
        return None
    common = sorted(set.intersection(*({s for s, _, _ in parts[p]["steps"]} for p in processes)))
    chosen = set(common[-SHOWN_STEPS:])
    spans = [(a, b) for p in processes for s, a, b in parts[p]["steps"] if s in chosen]
    if not spans:
        return None
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 0.9 + 0.7 * len(processes)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    labels = []
    for row, p in enumerate(processes):
        y = 2 * (len(processes) - 1 - row)
        for s, a, b in parts[p]["steps"]:
            if s in chosen:
                ax.broken_barh([((a - lo) / 1000, (b - a) / 1000)], (y + 1.1, 0.8),
                               facecolors="#d9d9d9", edgecolors="#555555")
                ax.text((a - lo) / 1000, y + 1.5, f" step {s}", va="center", fontsize=7)
        compute: list[tuple[float, float]] = []
        collective: list[tuple[float, float]] = []
        for a, b, is_collective in parts[p]["ops"]:
            if b >= lo and a <= hi:
                bar = ((a - lo) / 1000, max((b - a) / 1000, 1e-3))
                (collective if is_collective else compute).append(bar)
        ax.broken_barh(collective, (y + 0.1, 0.8), facecolors="#f28e2b")
        ax.broken_barh(compute, (y + 0.1, 0.8), facecolors="#4e79a7")
        name = f"p{p} {hosts.get(p, '')}" + (" (straggler)" if p == straggler else "")
        labels.append((y + 1.5, f"{name}: steps"))
        labels.append((y + 0.5, f"p{p}: devices"))
    ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize=8)
    ax.set_xlim(0, (hi - lo) / 1000)
    ax.set_xlabel("ms (clocks aligned to p0)")
    ax.set_title("blue: compute, orange: collective (incl. waiting), gaps: host/Python", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
