"""Render mesh and sharding descriptions as static HTML and ipywidgets (kernel side).

The descriptions come from ``jaxnb._engine.layout.describe``; this module never imports
JAX. Devices are coloured by owning process with a fixed palette, so a process
has the same colour in every view.
"""

from __future__ import annotations

from html import escape
from itertools import product
from typing import Any

from jaxnb._core.messages import plural
from jaxnb._widgets.palette import process_colour

__all__ = [
    "mesh_html",
    "mesh_widget",
    "sharding_html",
    "sharding_widget",
    "show",
]

MAX_BLOCK_ROWS = 64

_TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px;margin:4px 0"
_CELL = "border:1px solid #888;padding:3px 6px;text-align:center;vertical-align:middle"
_HEAD = _CELL + ";background:#eee;font-weight:bold"
_BOX = "font-family:sans-serif;font-size:13px;overflow-x:auto"

def mesh_html(desc: dict[str, Any]) -> str:
    """Static HTML of a mesh description: the device grid and a process legend."""
    return f'<div style="{_BOX}">{_mesh_title(desc)}{_mesh_body(desc)}</div>'


def sharding_html(desc: dict[str, Any]) -> str:
    """Static HTML of an array description: header, block grid (or axis summary), legend."""
    return f'<div style="{_BOX}">{_array_title(desc)}{_array_body(desc)}</div>'


def mesh_widget(desc: dict[str, Any]) -> Any:
    """An ipywidgets ``VBox`` showing the mesh."""
    return _widget(_mesh_title(desc), _mesh_body(desc))


def sharding_widget(desc: dict[str, Any]) -> Any:
    """An ipywidgets ``VBox`` showing the array's sharding."""
    return _widget(_array_title(desc), _array_body(desc))


def show(desc: dict[str, Any]) -> None:
    """Display a mesh or array description as a widget with a static HTML fallback."""
    from jaxnb._widgets._display import display_widget
    from jaxnb._widgets.layout_text import layout_text

    kind = desc.get("kind")
    text = layout_text(desc) if kind in ("mesh", "array", "tree") else None
    if kind == "mesh":
        display_widget(mesh_widget(desc), mesh_html(desc), text=text)
    elif kind == "array":
        display_widget(sharding_widget(desc), sharding_html(desc), text=text)
    elif kind == "tree":
        display_widget(_widget(_tree_title(desc), _tree_body(desc)), tree_html(desc), text=text)
    else:
        raise ValueError(f"show() got a description of kind {kind!r}; expected 'mesh' or 'array'")


def tree_html(desc: dict[str, Any]) -> str:
    """Static HTML of a pytree description: one row per leaf."""
    return f'<div style="{_BOX}">{_tree_title(desc)}{_tree_body(desc)}</div>'


def _tree_title(desc: dict[str, Any]) -> str:
    from jaxnb._widgets.layout_text import human_bytes

    name = desc.get("name")
    n = len(desc["leaves"])
    label = f"Pytree <code>{_esc(name)}</code>" if name else "Pytree"
    return f"<div><b>{label}</b>: {plural(n, 'leaf', 'leaves')}, " \
           f"{human_bytes(desc['bytes_per_device'])} per device</div>"


def _tree_body(desc: dict[str, Any]) -> str:
    from jaxnb._widgets.layout_text import MAX_ROWS, human_bytes

    head = "".join(_th(h) for h in ("leaf", "shape", "dtype", "spec", "bytes per device"))
    rows = []
    for leaf in desc["leaves"][:MAX_ROWS]:
        shape = "—" if leaf["shape"] is None else str(tuple(leaf["shape"]))
        cells = (leaf["path"], shape, leaf["dtype"], leaf["spec"], human_bytes(leaf["bytes_per_device"]))
        rows.append("<tr>" + "".join(_td(_esc(c)) for c in cells) + "</tr>")
    return f'<table style="{_TABLE}"><tr>{head}</tr>{"".join(rows)}</table>'


def _widget(title: str, body: str) -> Any:
    import ipywidgets as widgets

    return widgets.VBox([widgets.HTML(title), widgets.HTML(f'<div style="{_BOX}">{body}</div>')])


# -- mesh -------------------------------------------------------------------


def _mesh_title(desc: dict[str, Any]) -> str:
    name = desc.get("name")
    label = f"Mesh <code>{_esc(name)}</code>" if name else "Mesh"
    axes = ", ".join(
        f"{_esc(a)}={s}" for a, s in zip(desc["axis_names"], desc["axis_sizes"], strict=True)
    )
    n = len(_flat(desc["devices"]))
    procs = len(desc["processes"])
    return (
        f"<div><b>{label}</b> <code>{axes or '()'}</code> "
        f"({n} device{'s' * (n != 1)}, {procs} process{'es' * (procs != 1)})</div>"
    )


def _mesh_body(desc: dict[str, Any]) -> str:
    names, sizes, grid = desc["axis_names"], desc["axis_sizes"], desc["devices"]
    if not names:
        tables = [_grid_table([[grid]], "", [""], [""])]
    elif len(names) == 1:
        cols = [f"{_esc(names[0])}={j}" for j in range(sizes[0])]
        tables = [_grid_table([grid], _esc(names[0]), [""], cols)]
    else:
        tables = []
        for lead in product(*(range(s) for s in sizes[:-2])):
            sub = grid
            for i in lead:
                sub = sub[i]
            caption = ", ".join(f"{_esc(a)}={i}" for a, i in zip(names, lead, strict=False))
            rows = [f"{_esc(names[-2])}={i}" for i in range(sizes[-2])]
            cols = [f"{_esc(names[-1])}={j}" for j in range(sizes[-1])]
            corner = f"{_esc(names[-2])} \\ {_esc(names[-1])}"
            tables.append(_grid_table(sub, corner, rows, cols, caption))
    return "".join(tables) + _legend(desc["processes"])


def _grid_table(
    grid: list[list[dict[str, Any]]],
    corner: str,
    rows: list[str],
    cols: list[str],
    caption: str = "",
) -> str:
    cap = f"<caption style='text-align:left'>{caption}</caption>" if caption else ""
    head = "".join(map(_th, cols))
    body = "".join(
        f"<tr>{_th(r)}" + "".join(_device_cell(d) for d in row) + "</tr>"
        for r, row in zip(rows, grid, strict=True)
    )
    return f'<table style="{_TABLE}">{cap}<tr>{_th(corner)}{head}</tr>{body}</table>'


def _device_cell(dev: dict[str, Any]) -> str:
    proc = dev["process_index"]
    tip = f"device {dev['id']} · process {proc} · {dev['platform']} {dev['kind']}"
    if dev.get("host"):
        tip += f" · {dev['host']}"
    return (
        f'<td style="{_CELL};background:{process_colour(proc)}" title="{escape(tip)}">'
        f"<b>{dev['id']}</b><br><small>p{proc}</small></td>"
    )


def _legend(processes: list[dict[str, Any]]) -> str:
    items = "".join(
        f'<span style="margin-right:12px;white-space:nowrap">'
        f'<span style="display:inline-block;width:12px;height:12px;border:1px solid #888;'
        f'background:{process_colour(p["index"])};vertical-align:middle"></span> '
        f"process {p['index']} — {_esc(p['host'] or 'host ?')}</span>"
        for p in processes
    )
    return f'<div style="margin-top:4px">{items}</div>'


def _flat(grid: Any) -> list[Any]:
    return [x for g in grid for x in _flat(g)] if isinstance(grid, list) else [grid]


# -- array ------------------------------------------------------------------


def _array_title(desc: dict[str, Any]) -> str:
    name = desc.get("name")
    label = f"Array <code>{_esc(name)}</code>" if name else "Array"
    dims = [str(n) for n in desc["shape"]]
    shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    sh = desc["sharding"]
    text = f"<b>{label}</b> <code>{shape} {_esc(desc['dtype'])}</code> "
    text += _esc(sh["type"])
    if "spec" in sh:
        mesh = ", ".join(
            f"{_esc(a)}={s}"
            for a, s in zip(sh["mesh_axis_names"], sh["mesh_axis_sizes"], strict=True)
        )
        text += f" <code>{_esc(_spec_text(sh['spec']))}</code> on mesh <code>{mesh}</code>"
        if sh["replicated_over"]:
            text += f"; replicated over <code>{_esc(', '.join(sh['replicated_over']))}</code>"
    else:
        text += f" <code>{_esc(sh['repr'])}</code>"
    blocks, devices = desc["blocks"], desc["devices"]
    text += f"<br>{plural(len(blocks), 'block')} on {plural(len(devices), 'device')}"
    if desc.get("fully_replicated"):
        text += " (fully replicated)"
    return f"<div>{text}</div>"


def _spec_text(spec: list[Any]) -> str:
    def entry(e: Any) -> str:
        if isinstance(e, list):
            return repr(e[0]) if len(e) == 1 else "(" + ", ".join(map(repr, e)) + ")"
        return "None" if e is None else str(e)

    return "P(" + ", ".join(entry(e) for e in spec) + ")"


def _array_body(desc: dict[str, Any]) -> str:
    body = _block_grid(desc) if len(desc["shape"]) <= 2 else _axis_table(desc)
    return body + _legend(desc["processes"])


def _block_grid(desc: dict[str, Any]) -> str:
    blocks = desc["blocks"]
    proc = {d["id"]: d["process_index"] for d in desc["devices"]}
    by_key = {tuple(map(tuple, b["index"])): b for b in blocks}
    rank = len(desc["shape"])
    rows = sorted({k[0] for k in by_key}) if rank == 2 else [None]
    cols = sorted({k[-1] for k in by_key}) if rank >= 1 else [None]
    head = "".join(_th(_iv(c)) for c in cols)
    trs = []
    for r in rows:
        cells = []
        for c in cols:
            key = tuple(iv for iv in (r, c) if iv is not None)
            block = by_key.get(key)
            cells.append(_td(_block_cell(block, proc)))
        row_head = _iv(r) if r is not None else ""
        trs.append(f"<tr>{_th(row_head)}{''.join(cells)}</tr>")
    corner = "rows \\ cols" if rank == 2 else ("" if rank == 0 else "index")
    return f'<table style="{_TABLE}"><tr>{_th(corner)}{head}</tr>{"".join(trs)}</table>'


def _block_cell(block: dict[str, Any] | None, proc: dict[int, int]) -> str:
    if block is None:
        return "—"
    index = "[" + ", ".join(f"{a}:{b}" for a, b in block["index"]) + "]"
    copies = f" <small>({block['replicas']} copies)</small>" if block["replicas"] > 1 else ""
    return f"<small>{index}</small><br>{_chips(block['devices'], proc)}{copies}"


def _chips(ids: list[int], proc: dict[int, int]) -> str:
    return " ".join(
        f'<span style="background:{process_colour(proc[i])};border:1px solid #888;'
        f'border-radius:3px;padding:0 3px" title="device {i} · process {proc[i]}">{i}</span>'
        for i in ids
    )


def _axis_table(desc: dict[str, Any]) -> str:
    head = "".join(map(_th, ("axis", "size", "shards", "block", "sharded by")))
    keys = ("axis", "size", "shards", "block")
    rows = "".join(
        "<tr>" + "".join(_td(a[k]) for k in keys) + _td(_esc(_by_text(a["by"]))) + "</tr>"
        for a in desc["axes"]
    )
    proc = {d["id"]: d["process_index"] for d in desc["devices"]}
    shown = desc["blocks"][:MAX_BLOCK_ROWS]
    blocks = "".join(f"<tr>{_td(_block_cell(b, proc))}</tr>" for b in shown)
    more = len(desc["blocks"]) - len(shown)
    if more > 0:
        blocks += f"<tr>{_td(f'… {more} more blocks')}</tr>"
    return (
        f'<table style="{_TABLE}"><tr>{head}</tr>{rows}</table>'
        f'<table style="{_TABLE}"><tr>{_th("block → devices")}</tr>{blocks}</table>'
    )


def _by_text(by: Any) -> str:
    if isinstance(by, list):
        return ", ".join(by)
    return "sharded (no named mesh axis)" if by is None else str(by)


def _esc(text: Any) -> str:
    return escape(str(text), quote=False)


def _td(content: Any) -> str:
    return f'<td style="{_CELL}">{content}</td>'


def _th(text: str) -> str:
    return f'<th style="{_HEAD}">{text}</th>'


def _iv(iv: tuple[int, int] | None) -> str:
    return "" if iv is None else f"{iv[0]}:{iv[1]}"
