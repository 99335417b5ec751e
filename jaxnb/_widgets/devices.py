"""The devices view: one row per JAX process (host, pid, platform, local devices, state)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from jaxnb._widgets._display import display_widget
from jaxnb._widgets.palette import process_colour


def devices_html(processes: Sequence[Any], title: str = "jaxnb cluster") -> str:
    """Static HTML table of the processes (works in any notebook viewer)."""
    total = next((p.global_device_count for p in processes if p.global_device_count), None)
    rows = []
    for p in processes:
        devices = ", ".join(f"{d['id']} ({d['kind']})" for d in p.local_devices) or "not initialised"
        colour = process_colour(p.process_index)
        rows.append(
            "<tr>"
            f'<td style="background:{colour};color:black;padding:2px 6px">p{p.process_index}</td>'
            f"<td>{html.escape(p.host)}</td><td>{p.pid}</td>"
            f"<td>{html.escape(str(p.platform or '-'))}</td>"
            f"<td>{len(p.local_devices)}</td><td>{html.escape(devices)}</td>"
            f"<td>{html.escape(p.state)}</td></tr>"
        )
    summary = (
        f"{len(processes)} processes, {total} global devices"
        if total
        else f"{len(processes)} processes (jax.distributed not initialised by jaxnb)"
    )
    return (
        f'<div class="jaxnb-devices"><b>{html.escape(title)}</b>: {summary}'
        '<table style="border-collapse:collapse;text-align:left">'
        "<tr><th>process</th><th>host</th><th>pid</th><th>platform</th>"
        "<th>local devices</th><th>device ids (kind)</th><th>state</th></tr>"
        + "".join(rows)
        + "</table></div>"
    )


def show_devices(processes: Sequence[Any], title: str = "jaxnb cluster") -> None:
    """Display the devices table as a widget with its static HTML fallback."""
    import ipywidgets as widgets

    page = devices_html(processes, title)
    display_widget(widgets.HTML(page), page)
