"""Static text and HTML for the training dashboard: process table, summary table, durations, rates
(as HTML for the page, as text columns for a terminal)."""

from __future__ import annotations

import html
from typing import Any

from jaxnb._core.text_table import columns

MAX_ROWS = 16  # the process table shows at most this many processes (the stragglers)
TABLE = ("<table style='border-collapse:collapse;font-size:12px;margin:4px 0;"
         "font-variant-numeric:tabular-nums'>{}</table>")
CELL = ("<{t} style='padding:3px 12px;text-align:{a};border-bottom:1px solid #e0e0e0;"
        "white-space:nowrap'>{v}</{t}>")


PROCESS_HEAD = ["process", "last step", "steps/s", "last report", ""]


def process_cells(rows: list[dict[str, Any]]) -> tuple[list[list[str]], str]:
    """The process table's cells, as text, from ``process_stats`` rows (with many processes,
    the stragglers only); and a note on the processes left out (empty when none)."""
    more = ""
    if len(rows) > MAX_ROWS:
        more = f"… {len(rows) - MAX_ROWS} more processes, all further ahead"
        rows = sorted(rows, key=lambda r: (r["step"] is not None, r["step"] or 0))[:MAX_ROWS]
    memory = any("memory" in r for r in rows)  # once the processes sent their memory
    cells = [[str(r["process"]), "—" if r["step"] is None else str(r["step"]), rate_text(r["steps_per_s"]),
              "—" if r["age_s"] is None else f"{duration_text(r['age_s'], 1)} ago",
              *([r.get("memory", "—")] if memory else []), r["flag"]]
             for r in rows]
    return cells, more


def process_head(rows: list[dict[str, Any]]) -> list[str]:
    """The process table's head (with a memory column once the processes sent their memory)."""
    return [*PROCESS_HEAD[:-1], "memory (peak)", ""] if any("memory" in r for r in rows) else PROCESS_HEAD


def process_table(rows: list[dict[str, Any]]) -> str:
    """HTML table of ``process_stats`` rows; with many processes, the stragglers only."""
    cells, more = process_cells(rows)
    body = "".join(row_html([*c[:-1], f"<b style='color:#d62728'>{c[-1]}</b>" if c[-1] else ""])
                   for c in cells)
    return TABLE.format(row_html(process_head(rows), head=True) + body) + (f"<p>{more}</p>" if more else "")


def process_table_text(rows: list[dict[str, Any]]) -> str:
    """The process table as text columns (what a terminal shows)."""
    cells, more = process_cells(rows)
    return text_columns([process_head(rows), *cells]) + (f"\n{more}" if more else "")


def text_columns(rows: list[list[str]]) -> str:
    """Rows of cells as text, each column as wide as its widest cell."""
    return "\n".join(columns(rows))


def summary_table(items: list[tuple[str, str]]) -> str:
    """The static summary: a two-column HTML table of (name, value) pairs, escaped here."""
    body = "".join(row_html([html.escape(k), html.escape(v)]) for k, v in items)
    return f"<div class='jaxnb-summary'>{TABLE.format(body)}</div>"


def mean_rates_text(rows: list[dict[str, Any]], limit: int = 8, key: str = "mean_steps_per_s") -> str:
    """Steps/s (``key`` of ``process_stats`` rows) of the first ``limit``: ``p0: … · p1: …``."""
    rates = [f"p{r['process']}: {rate_text(r[key])}" for r in rows[:limit]]
    rates += [f"… {len(rows) - limit} more"] if len(rows) > limit else []
    return " · ".join(rates)


def rate_items(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The summary's two rates, named: over the steps only, and over the wall time."""
    steps = mean_rates_text(rows) + " (step rate: over the steps, compiles and pauses left out)"
    wall = mean_rates_text(rows, key="wall_steps_per_s") + " (steps ÷ elapsed, compiles included)"
    return [("steps/s", steps), ("wall rate", wall)]


def row_html(cells: list[str], head: bool = False) -> str:
    """A row of already-escaped cells; the first cell (every cell in a head) is a <th>."""
    return "<tr>{}</tr>".format("".join(
        CELL.format(t="th" if head or i == 0 else "td", a="left" if i == 0 else "right", v=v)
        for i, v in enumerate(cells)))


def steps_text(step: int, total: int | None) -> str:
    """``step / total``, or just the step when the total is unknown."""
    return f"{step} / {total}" if total else str(step)


def duration_text(seconds: float, digits: int = 0) -> str:
    """h:mm:ss or m:ss; under a minute with ``digits``, seconds to that many decimals."""
    if seconds < 60 and digits:
        return f"{seconds:.{digits}f} s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def rate_text(rate: float | None) -> str:
    """Steps/s, or s/step when under one step a second; a dash when unknown or zero."""
    if not rate:
        return "— steps/s"
    return f"{rate:.3g} steps/s" if rate >= 1 else f"{1 / rate:.3g} s/step"
