"""``%jax_who`` and ``%jax_diff NAME``: the processes' variables side by side, compared through
the fingerprints each process takes of what it holds (:mod:`jaxnb._engine.debug.variables`).

:func:`who` is one row per variable: process 0's description (type, shape, dtype, sharding,
bytes) and whether every process holds the same value, from fingerprints only (no data moves).
:func:`diff` lists the leaves of one pytree that differ: which processes differ from the
lowest one holding the leaf, and, where the shapes agree, the largest difference (measured on
the engines, every process taking part).
"""

from __future__ import annotations

from typing import Any

from jaxnb._core import ipp_internals
from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError, as_local, remote_error
from jaxnb._core.messages import label, labels, plural
from jaxnb._core.state import Group
from jaxnb._widgets.layout_text import human_bytes, table

_WHO = EngineCall("jaxnb._engine.debug.variables:who")
_PIECES = EngineCall("jaxnb._engine.debug.variables:pieces")
_DIFFERENCES = EngineCall("jaxnb._engine.debug.variables:differences")
#: How long the processes may take to answer (seconds); measuring differences may take longer.
ASK_SECONDS = 120.0
NOT_ANSWERING = "the processes did not answer within {seconds:g} s; run `%jax_cluster status`"
#: Array kinds a numeric difference is measured for (bool, ints, floats, complex).
NUMERIC = "biufc"
SAME = "yes"
NOT_COMPARED = "—"
SHARDED = "— (sharded: one copy of each block)"


# ---- %jax_who ------------------------------------------------------------------------------


def who(group: Group) -> list[dict[str, Any]]:
    """One row per user variable: ``name``, process 0's ``type``, ``shape``, ``dtype``,
    ``sharding``, ``bytes``, ``same`` (text) and ``differing`` (the processes that differ)."""
    answers = _everywhere(group, _WHO)
    by_process = {p: {row["name"]: row for row in rows} for p, rows in answers.items()}
    names = sorted({name for rows in by_process.values() for name in rows})
    found = []
    for name in names:
        held = {p: rows[name] for p, rows in by_process.items() if name in rows}
        first = held[min(held)]
        same, differing = agreement(held, group.indices)
        found.append({key: first[key] for key in ("name", "type", "shape", "dtype", "sharding", "bytes")}
                     | {"same": same, "differing": differing})
    return found


def who_text(rows: list[dict[str, Any]]) -> str:
    """The table ``%jax_who`` prints."""
    if not rows:
        return "no variables on the processes (define some in a %%jax_cluster cell)"
    cells = [["name", "type", "shape", "dtype", "sharding", "bytes", "same on every process?"]]
    for row in rows:
        shape = NOT_COMPARED if row["shape"] is None else str(tuple(row["shape"]))
        cells.append([row["name"], row["type"], shape, row["dtype"] or NOT_COMPARED,
                      row["sharding"] or NOT_COMPARED, human_bytes(row["bytes"]), row["same"]])
    return "\n".join(table(cells))


def agreement(held: dict[int, dict[str, Any]], processes: list[int]) -> tuple[str, list[int]]:
    """Whether every process holds the same value: the text, and the processes that differ."""
    missing = [p for p in processes if p not in held]
    if missing:
        return f"no: not defined on {labels(missing)}", missing
    first = held[min(held)]
    kind = [p for p, row in held.items() if (row["type"], row["shape"], row["dtype"])
            != (first["type"], first["shape"], first["dtype"])]
    if kind:
        return f"no: {labels(kind)} holds another type or shape", kind
    differing: set[int] = set()
    compared = False
    for key in {key for row in held.values() for key in row["pieces"]}:
        prints = {p: row["pieces"].get(key) for p, row in held.items() if key in row["pieces"]}
        if len(prints) < 2 or None in prints.values():
            continue
        compared = True
        reference = prints[min(prints)]
        differing.update(p for p, fp in prints.items() if fp != reference)
    if differing:
        return f"no: {labels(differing)} {'differs' if len(differing) == 1 else 'differ'}", sorted(differing)
    if compared:
        return SAME, []
    sharded = first["type"] == "Array" and any("@" in key for key in first["pieces"])
    return (SHARDED if sharded else NOT_COMPARED), []


# ---- %jax_diff NAME ----------------------------------------------------------------------


def diff(group: Group, name: str) -> list[dict[str, Any]]:
    """The pieces of pytree ``name`` that are not the same on every process: ``path``,
    ``block`` (of a global array, else None), ``reference`` (the lowest process holding it),
    ``differing`` processes, ``largest`` difference (None where not measured) and ``note``."""
    held = _everywhere(group, _PIECES, name)
    keys = sorted({key for pieces in held.values() for key in pieces})
    rows, wanted = [], []
    for key in keys:
        copies = {p: pieces[key] for p, pieces in held.items() if key in pieces}
        row = difference_row(key, copies, group.indices)
        if row is None:
            continue
        rows.append(row)
        if row.pop("measure", False):
            first = copies[row["reference"]]
            wanted.append({"key": key, "shape": first["shape"], "dtype": first["dtype"]})
    if wanted and group.size > 1 and group.options.init:
        measured = _everywhere(group, _DIFFERENCES, name, wanted)[group.indices[0]]
        for row in rows:
            spread = measured.get(row["key"])
            if spread is not None:
                row["largest"] = max(spread[p] or 0.0 for p in row["differing"])
    for row in rows:
        row.pop("key")
    return rows


def diff_text(name: str, rows: list[dict[str, Any]]) -> str:
    """What ``%jax_diff NAME`` prints."""
    if not rows:
        return f"{name}: the same on every process (compared by fingerprint)"
    cells = [["leaf", "processes", "largest difference"]]
    for row in rows:
        where = row["path"] + (f" block {row['block']}" if row["block"] else "")
        who = (f"{labels(row['differing'])} differ{'s' * (len(row['differing']) == 1)} from "
               f"{label(row['reference'])}")
        largest = "" if row["largest"] is None else f"{row['largest']:.6g}"
        note = f"({row['note']})" if largest and row["note"] else row["note"]
        cells.append([where, who, " ".join(t for t in (largest, note) if t)])
    return "\n".join([f"{name}: {plural(len(rows), 'leaf', 'leaves')} not the same on every process",
                      *table(cells)])


def difference_row(key: str, copies: dict[int, dict[str, Any]],
                   processes: list[int]) -> dict[str, Any] | None:
    """The row of one piece that is not the same everywhere (None if it is, or cannot be told)."""
    reference = min(copies)
    first = copies[reference]
    row: dict[str, Any] = {"key": key, "path": first["path"], "block": first["block"],
                           "reference": reference, "differing": [], "largest": None, "note": ""}
    if first["block"] is None and len(copies) < len(processes):
        row["differing"] = [p for p in processes if p not in copies]
        row["note"] = "not in the pytree there"
        return row
    if len(copies) < 2 or any(c["fp"] is None for c in copies.values()):
        return None  # held by one process only, or not a value that can be compared
    row["differing"] = [p for p, c in copies.items() if c["fp"] != first["fp"]]
    if not row["differing"]:
        return None
    shapes = {p: (tuple(c["shape"] or ()), c["dtype"]) for p, c in copies.items()}
    if first["value"] is not None:  # a number or a string: its values say it all
        row["note"] = ", ".join(f"{label(p)[1:-1]}: {copies[p]['value']}" for p in sorted(copies))
        numbers = [c.get("number") for c in copies.values()]
        if None not in numbers:
            row["largest"] = max(abs(n - first["number"]) for n in numbers)
    elif len(set(shapes.values())) > 1:
        row["note"] = "shapes differ: " + ", ".join(
            f"{label(p)[1:-1]} {s} {d}" for p, (s, d) in sorted(shapes.items()))
    elif first["dtype"] and first["dtype"].lstrip("<>|=")[:1] in NUMERIC:
        row["measure"] = True
    return row


def _everywhere(group: Group, call: EngineCall, *args: Any) -> dict[int, Any]:
    """``call(*args)`` on every process at once; its answers by process (an error raised)."""
    ar = group.view.apply_async(call, *args)
    if not ar.wait(ASK_SECONDS):
        raise ClusterStateError(NOT_ANSWERING.format(seconds=ASK_SECONDS))
    answers = dict(zip(group.indices, ipp_internals.answers(ar, group.client), strict=True))
    errors = {p: a for p, a in answers.items() if isinstance(a, BaseException)}
    if errors:
        for error in errors.values():
            local = as_local(error)
            if local is not None:
                raise local
        raise remote_error(errors)
    return answers
