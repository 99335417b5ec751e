"""The devices view: one row per JAX process (host, pid, platform, local devices, state)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from jaxnb._core.messages import plural, size_text
from jaxnb._core.spelling import example
from jaxnb._widgets._display import display_widget
from jaxnb._widgets.palette import process_colour

_CELL = "padding:3px 12px;border-bottom:1px solid #e0e0e0;white-space:nowrap"
_HEAD = ("process", "host", "pid", "platform", "local devices", "device ids (kind)", "state",
         "compile cache hits")
_ALIGN = ("left", "right", "left", "right", "left", "left", "right")  # numbers right-aligned


def devices_html(processes: Sequence[Any], title: str = "jaxnb cluster", lost: Sequence[str] = (),
                 notes: Sequence[str] = ()) -> str:
    """Static HTML table of the processes (works in any notebook viewer); ``lost``: the places
    left out of the group (a host or slot lost to a ``--min-processes`` run), a row each;
    ``notes``: lines under it (how the traffic travels)."""
    total = next((p.global_device_count for p in processes if p.global_device_count), None)
    rows = []
    for p in processes:
        devices = ", ".join(f"{d['id']} ({d['kind']})" for d in p.local_devices) or "not initialised"
        colour = process_colour(p.process_index)
        cells = [html.escape(p.host), str(p.pid), html.escape(str(p.platform or "-")),
                 str(len(p.local_devices)), html.escape(devices), html.escape(p.state),
                 html.escape(cache_hits_text(p.compile_cache))]
        rows.append(
            f'<tr><td style="{_CELL};background:{colour};color:black">p{p.process_index}</td>'
            + "".join(f'<td style="{_CELL};text-align:{a}">{c}</td>'
                      for c, a in zip(cells, _ALIGN, strict=True))
            + "</tr>"
        )
    for place in lost:
        rows.append(f'<tr class="jaxnb-lost"><td style="{_CELL};color:#d62728">lost</td>'
                    f'<td style="{_CELL};color:#d62728" colspan="{len(_ALIGN)}">'
                    f"{html.escape(place)}</td></tr>")
    summary = (
        f"{plural(len(processes), 'process', 'processes')}, {plural(total, 'global device')}"
        if total
        else f"{plural(len(processes), 'process', 'processes')} (jax.distributed not initialised by jaxnb)"
    ) + (f"; {len(lost)} lost" if lost else "")
    return (
        f'<div class="jaxnb-devices"><b>{html.escape(title)}</b>: {summary}'
        '<table style="border-collapse:collapse;text-align:left;margin:4px 0;'
        'font-variant-numeric:tabular-nums">'
        "<tr>" + "".join(f'<th style="{_CELL};text-align:{a}">{h}</th>'
                         for h, a in zip(_HEAD, ("left", *_ALIGN), strict=True)) + "</tr>"
        + "".join(rows)
        + "</table>"
        + "".join(f"<div>{html.escape(line)}</div>" for line in [*cache_lines(processes), *notes])
        + "".join(f"<div>{html.escape(line)}</div>" for line in features_off(processes))
        + "</div>"
    )


def cache_hits_text(cache: dict | None) -> str:
    """``3 of 8 (1.2 s saved)``: a process's hits of its lookups; ``off``; ``—`` when not known."""
    if cache is None:
        return "—"
    if cache.get("folder") is None:
        return "off"  # asked for, or a folder its host cannot make (the line under the table)
    saved = cache.get("saved_seconds") or 0.0
    return f"{cache['hits']} of {cache['lookups']}" + (f" ({saved:.1f} s saved)" if saved else "")


def cache_lines(processes: Sequence[Any]) -> list[str]:
    """One line per cache folder (each host has its own): where, how many entries, how big."""
    seen: dict[tuple[str, str], dict] = {}
    problems: dict[str, str] = {}
    for p in processes:
        cache = p.compile_cache
        if cache is not None and cache.get("folder") is not None:
            seen.setdefault((p.host, cache["folder"]), cache)
        elif cache is not None and cache.get("problem"):
            problems.setdefault(p.host, cache["problem"])
    hosts = {host for host, _ in seen} | set(problems)
    lines = [f"compile cache{f' on {host}' if len(hosts) > 1 else ''}: {folder} — "
             f"{plural(cache['entries'], 'entry', 'entries')}, {size_text(cache['bytes'])}"
             for (host, folder), cache in seen.items()]
    lines += [f"compile cache{f' on {host}' if len(hosts) > 1 else ''}: off ({problem}; "
              f"pass {example('compile_cache', 'DIR')} with a folder it can write)"
              for host, problem in problems.items()]
    if not lines and any(p.compile_cache is not None for p in processes):
        return ["compile cache: off"]
    return lines


def features_off(processes: Sequence[Any]) -> list[str]:
    """One line per optional feature turned off (a library moved the part it relies on), on
    the engines (as their compile-cache answer reports) or in this kernel; ``on pN`` when only
    some processes have it off."""
    from jaxnb._core import optional

    where: dict[str, list[int]] = {}
    for p in processes:
        for line in (p.compile_cache or {}).get("features_off") or []:
            where.setdefault(line, []).append(p.process_index)
    lines = [line if len(ps) == len(processes) else f"{line} on {', '.join(f'p{i}' for i in ps)}"
             for line, ps in where.items()]
    return lines + [f"{line} in this kernel" for line in optional.problems()]


def show_devices(processes: Sequence[Any], title: str = "jaxnb cluster", lost: Sequence[str] = (),
                 notes: Sequence[str] = ()) -> None:
    """Display the devices table as a widget with its static HTML fallback."""
    import ipywidgets as widgets

    page = devices_html(processes, title, lost, notes)
    display_widget(widgets.HTML(page), page)
