"""Plain-text copies of the mesh, sharding and pytree views (their ``text/plain``).

What a terminal, a text-only viewer or ``capture_output`` shows of ``%jax_mesh``:
aligned tables, one line per row, instead of the HTML's cells run together.
"""

from __future__ import annotations

from itertools import product
from typing import Any

from jaxnb._core.text_table import columns as table
from jaxnb._core.text_table import human_bytes

MAX_ROWS = 64


def layout_text(desc: dict[str, Any]) -> str:
    """The text of a mesh, array or pytree description."""
    kind = desc.get("kind")
    if kind == "mesh":
        return mesh_text(desc)
    if kind == "array":
        return sharding_text(desc)
    return tree_text(desc)


def mesh_text(desc: dict[str, Any]) -> str:
    names, sizes, grid = desc["axis_names"], desc["axis_sizes"], desc["devices"]
    axes = ", ".join(f"{a}={s}" for a, s in zip(names, sizes, strict=True)) or "()"
    n, procs = _count(grid), len(desc["processes"])
    title = f"Mesh {desc.get('name') or ''} {axes} ({n} device{'s' * (n != 1)}, " \
            f"{procs} process{'es' * (procs != 1)})".replace("  ", " ")
    lines = [title]
    if len(names) <= 1:
        cells = grid if names else [grid]
        cols = [f"{names[0]}={j}" for j in range(sizes[0])] if names else [""]
        lines += table([cols, [_dev(d) for d in cells]])
    else:
        for lead in product(*(range(s) for s in sizes[:-2])):
            sub = grid
            for i in lead:
                sub = sub[i]
            if lead:
                lines.append(", ".join(f"{a}={i}" for a, i in zip(names, lead, strict=False)))
            head = [f"{names[-2]} \\ {names[-1]}"] + [f"{names[-1]}={j}" for j in range(sizes[-1])]
            body = [[f"{names[-2]}={i}"] + [_dev(d) for d in row] for i, row in enumerate(sub)]
            lines += table([head, *body])
    return "\n".join(lines)


def sharding_text(desc: dict[str, Any]) -> str:
    shape = "[" + ", ".join(str(n) for n in desc["shape"]) + "]"
    sh = desc["sharding"]
    spec = " spec P(" + ", ".join(_spec(e) for e in sh["spec"]) + ")" if "spec" in sh else ""
    title = f"Array {desc.get('name') or ''} {desc['dtype']}{shape} {sh['type']}{spec}".replace("  ", " ")
    rows = [["block", "devices", "processes"]]
    for b in desc["blocks"][:MAX_ROWS]:
        index = "[" + ", ".join(f"{a}:{z}" for a, z in b["index"]) + "]"
        rows.append([index, ",".join(map(str, b["devices"])),
                     ",".join(f"p{p}" for p in b["process_indices"])])
    lines = [title, *table(rows)]
    if len(desc["blocks"]) > MAX_ROWS:
        lines.append(f"... {len(desc['blocks']) - MAX_ROWS} more blocks")
    return "\n".join(lines)


def tree_text(desc: dict[str, Any]) -> str:
    rows = [["leaf", "shape", "dtype", "spec", "bytes per device"]]
    for leaf in desc["leaves"][:MAX_ROWS]:
        shape = "—" if leaf["shape"] is None else str(tuple(leaf["shape"]))
        rows.append([leaf["path"], shape, leaf["dtype"], leaf["spec"], human_bytes(leaf["bytes_per_device"])])
    lines = [f"Pytree {desc.get('name') or ''}: {len(desc['leaves'])} leaves, "
             f"{human_bytes(desc['bytes_per_device'])} per device".replace("  ", " "), *table(rows)]
    if len(desc["leaves"]) > MAX_ROWS:
        lines.append(f"... {len(desc['leaves']) - MAX_ROWS} more leaves")
    return "\n".join(lines)


def _dev(d: dict[str, Any]) -> str:
    return f"{d['id']} [p{d['process_index']}]"


def _spec(e: Any) -> str:
    if isinstance(e, list):
        return repr(e[0]) if len(e) == 1 else "(" + ", ".join(map(repr, e)) + ")"
    return "None" if e is None else repr(e)


def _count(grid: Any) -> int:
    return sum(_count(g) for g in grid) if isinstance(grid, list) else 1
