"""The memory view of ``%jax_cluster memory``: per process and device, then the largest arrays;
a widget with its static HTML and text copies (papermill, nbconvert, terminals)."""

from __future__ import annotations

import html
from typing import Any

from jaxnb._core.memory_text import (
    ARRAY_HEAD,
    DEVICE_HEAD,
    array_cells,
    device_cells,
    merged_arrays,
    report_text,
    where_text,
)
from jaxnb._widgets._display import display_widget
from jaxnb._widgets.run_text import TABLE, row_html

CPU_NOTE = ("CPU devices keep no statistics: \"in use\" is the sum of the live arrays each holds; "
            "the process's RSS and the host's memory (or its cgroup's limit) stand beside it.")


def memory_html(processes: list[dict[str, Any]]) -> str:
    """Static HTML: the device table, then the largest arrays (every cell escaped)."""

    def table(head: list[str], rows: list[list[str]]) -> str:
        body = "".join(row_html([html.escape(c) for c in r]) for r in rows)
        return TABLE.format(row_html(head, head=True) + body)

    parts = ["<div class='jaxnb-memory'><b>memory per process and device</b>",
             table(DEVICE_HEAD, device_cells(processes))]
    if any(d.get("source") == "live arrays" for p in processes for d in p.get("devices") or []):
        parts.append(f"<small>{html.escape(CPU_NOTE)}</small>")
    arrays = merged_arrays(processes)
    count = sum(p.get("array_count", 0) for p in processes)
    if arrays:
        parts += [f"<br><b>largest live arrays</b> (of {count})",
                  table(ARRAY_HEAD, [array_cells(r, where_text(r)) for r in arrays])]
    else:
        parts.append("<p>no live arrays</p>")
    return "".join(parts) + "</div>"


def show_memory(processes: list[dict[str, Any]]) -> None:
    """Display the memory view: a widget, with its static HTML and text copies."""
    import ipywidgets as widgets

    page = memory_html(processes)
    display_widget(widgets.HTML(page), page, text=report_text(processes))
