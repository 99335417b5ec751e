"""What ``%%jax_profile`` shows: the step table, the straggler line, how to open the trace.

Static outputs (HTML with a text fallback, a PNG), so a saved notebook keeps them.
"""

from __future__ import annotations

import html
import os

from jaxnb._profile.result import ProfileResult
from jaxnb._profile.steps import PARTS

_COLUMNS = ("total_ms", *PARTS)


def table_text(result: ProfileResult) -> str:
    """The per-process table (medians per step) as plain text, with the verdict and commands."""
    if not result.steps:
        return "\n".join(["jaxnb: no trace came back from any process",
                          *(f"p{p}: {why}" for p, why in sorted(result.missing.items()))])
    med = result.summary()
    counts = _step_counts(result)
    head = f"{'process':<16}{'steps':>6}" + "".join(f"{_title(c):>20}" for c in _COLUMNS)
    lines = [head]
    for p in sorted(med):
        mark = "  ← straggler" if p == result.straggler else ""
        name = f"p{p} {result.hosts.get(p, '')}"[:15]
        lines.append(f"{name:<16}{counts.get(p, 0):>6}"
                     + "".join(f"{med[p][c]:>20.2f}" for c in _COLUMNS) + mark)
    return "\n".join([*lines, *_notes(result)])


def table_html(result: ProfileResult) -> str:
    """The same table as HTML; the straggler's row and its cause are highlighted."""
    if not result.steps:
        return f"<pre>{html.escape(table_text(result))}</pre>"
    med = result.summary()
    counts = _step_counts(result)
    cells = "".join(f"<th style='text-align:right'>{_title(c)}</th>" for c in _COLUMNS)
    rows = [f"<tr><th>process</th><th>host</th><th>steps</th>{cells}</tr>"]
    for p in sorted(med):
        strag = p == result.straggler
        style = " style='background:#fde2e1'" if strag else ""
        tds = "".join(
            f"<td style='text-align:right{';font-weight:bold' if strag and c == result.cause else ''}'>"
            f"{med[p][c]:.2f}</td>" for c in _COLUMNS)
        rows.append(f"<tr{style}><td>p{p}{' (straggler)' if strag else ''}</td>"
                    f"<td>{html.escape(result.hosts.get(p, ''))}</td><td>{counts.get(p, 0)}</td>{tds}</tr>")
    notes = "".join(f"<div>{html.escape(n)}</div>" for n in _notes(result))
    return (f"<div class='jaxnb-profile'><table>{''.join(rows)}</table>"
            f"<div style='font-size:smaller'>median ms per step</div>{notes}</div>")


def commands(result: ProfileResult) -> list[str]:
    """How to open the run folder in XProf and the merged trace in Perfetto."""
    found = [f"XProf:    xprof --logdir {result.path} --port 8791   (then open http://localhost:8791)"]
    if result.perfetto:
        found.append(f"Perfetto: open https://ui.perfetto.dev and drop in {result.perfetto}")
    return found


def _notes(result: ProfileResult) -> list[str]:
    notes = [result.verdict()]
    if len(result.clock_error_ms) > 1:
        worst = max(result.clock_error_ms.values())
        off = max(abs(v) for v in result.clock_offsets_ms.values())
        notes.append(f"clocks aligned to p0: largest offset {off:.3f} ms, known within ±{worst:.3f} ms")
    if result.steps and len({r["step"] for r in result.steps}) == 1 and result.steps[0]["step"] == 0:
        notes.append("no jax.profiler.StepTraceAnnotation in the cell: the whole cell counts as one step")
    for p, why in sorted(result.missing.items()):
        notes.append(f"p{p}: no trace ({why})")
    notes.extend(commands(result))
    return notes


def _step_counts(result: ProfileResult) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in result.steps:
        counts[r["process"]] = counts.get(r["process"], 0) + 1
    return counts


def _title(column: str) -> str:
    return column.replace("_ms", " ms").replace("collective", "collective wait")


def show(result: ProfileResult, timeline_png: bytes | None) -> None:
    """Display the table (HTML + text) and the timeline picture in the notebook, or print them."""
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:  # pragma: no cover - IPython is a dependency
        get_ipython = None
    text = table_text(result)
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    publish_display_data({"text/plain": text, "text/html": table_html(result)})
    if timeline_png:
        import base64

        publish_display_data({"image/png": base64.b64encode(timeline_png).decode("ascii"),
                              "text/plain": f"<timeline: {os.path.dirname(result.perfetto or '')}"
                                            "/timeline.png>"})
