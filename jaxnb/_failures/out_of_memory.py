"""An out-of-memory error explained: the process and device, the size XLA asked for and the
limit, in one line; then the largest live arrays on that device (with their shardings and the
variables holding them), what is typical to try given those arrays, and XLA's text, folded.

The process that ran out noted what it held at that moment (``jaxnb._engine.memory.
out_of_memory``); this module takes the note and rewrites the error the notebook raises (a cell,
a divergence, a training run), in place. Other processes are released as for any failure.
"""

from __future__ import annotations

import re
import time
from typing import Any

from jaxnb._core.contract import OUT_OF_MEMORY, EngineCall
from jaxnb._core.errors import ProcessFailure, RemoteError, traceback_text
from jaxnb._core.memory_text import ARRAY_HEAD, array_cells, limit_text
from jaxnb._core.messages import label, labels
from jaxnb._core.state import Group
from jaxnb._core.text_table import columns, human_bytes

_TAKE = EngineCall("jaxnb._engine.memory.oom_note:take")
#: What XLA says when it cannot make an allocation.
MARK = re.compile(OUT_OF_MEMORY)
#: How long a process that ran out may take to hand over its note (seconds).
ANSWER_SECONDS = 5.0
#: XLA's text is shown up to this many lines; the rest is on the error (``xla_text``).
FOLD_LINES = 4
FOLDED = "… {more} more lines of XLA's text: `import sys; print(sys.last_value.xla_text)`"
#: An array this large a share of the device's arrays is worth naming in a suggestion.
NOTABLE_SHARE = 0.05


def out_of_memory(errors: dict[int, Any]) -> dict[int, str]:
    """The processes whose error is an out-of-memory, with the first line of XLA's text."""
    found = {}
    for p, error in errors.items():
        text = traceback_text(error)
        if MARK.search(text):
            value = str(getattr(error, "evalue", "") or "")
            line = next((ln for ln in value.splitlines() if MARK.search(ln)), "")
            found[p] = line.strip() or next(ln for ln in text.splitlines() if MARK.search(ln)).strip()
    return found


def take_notes(group: Group, lines: dict[int, str]) -> dict[int, dict[str, Any]]:
    """Each process's note of its out-of-memory error (those that answer in time)."""
    asked = {}
    for p, line in lines.items():
        try:
            asked[p] = group.engine(p).apply_async(_TAKE, line)
        except Exception:  # its engine is gone: explain from XLA's text alone
            continue
    deadline = time.monotonic() + ANSWER_SECONDS
    notes = {}
    for p, ar in asked.items():
        try:
            value = ar.get(timeout=max(deadline - time.monotonic(), 0.01))
        except Exception:  # no answer in time, or it failed: explain from XLA's text alone
            continue
        if isinstance(value, dict):
            notes[p] = value
    return notes


def explain(group: Group, error: RemoteError, errors: dict[int, Any]) -> RemoteError:
    """``error`` rewritten (in place) when some of ``errors`` are out-of-memory errors; else as is."""
    lines = out_of_memory(errors)
    if not lines:
        return error
    notes = take_notes(group, lines) if group.running else {}
    first = min(lines)
    note = notes.get(first) or {"message": lines[first], "text": lines[first]}
    before = error.summary
    error.summary = one_line(first, note, lines[first])
    blocks = [details(first, note)]
    allocator = note.get("allocator_log") or []
    if allocator:  # XLA's allocator lines, held back on the engine: under the explanation, folded
        blocks.append(allocator_block(first, allocator))
    if isinstance(error, ProcessFailure):
        blocks.append(f"Then: {before}")
    elif len(lines) > 1:
        blocks.append(f"{labels(lines)} ran out of memory.")
    error.xla_text = "\n".join(  # type: ignore[attr-defined]
        f"---- {label(p)} ----\n{notes[p]['text'] if p in notes else lines[p]}" for p in sorted(lines))
    if allocator:
        error.xla_text += f"\n---- {label(first)}: XLA's allocator ----\n" + "\n".join(allocator)  # type: ignore[attr-defined]
    texts = {n["text"] for n in notes.values() if n.get("text")}
    error.tracebacks = [*blocks, *(fold(tb, texts) for tb in error.tracebacks)]
    error.processes = sorted(set(error.processes) | set(lines))
    return error


def allocator_block(p: int, allocator: list[str], shown: int = 2) -> str:
    """XLA's allocator lines (held back on the engine, not printed above the explanation): the
    first ``shown``, the rest folded into the error's ``xla_text``."""
    lines = [f"XLA's allocator on {label(p)} said ({len(allocator)} lines):"]
    lines += ["  " + line[:160] for line in allocator[:shown]]
    if len(allocator) > shown:
        lines.append("  " + FOLDED.format(more=len(allocator) - shown))
    return "\n".join(lines)


def one_line(p: int, note: dict[str, Any], message: str) -> str:
    """``[p1] ran out of memory on cpu:0 (cpu): XLA asked for 4.4 TB; limit host memory 25 GB``."""
    device = note.get("device")
    where = f" on {device['name']} ({device['kind']})" if device else ""
    asked = note.get("requested")
    said = (message.strip().splitlines() or [""])[0][:120]
    asked_text = f"XLA asked for {human_bytes(asked)}" if asked else f"XLA: {said}"
    host = note.get("host_memory") or {}
    limit = f"limit {limit_text(device, host)}" if device or host else "limit not known"
    on_host = host.get("available") and not (device or {}).get("limit")
    free = f", {human_bytes(host['available'])} free" if on_host else ""
    return f"{label(p)} ran out of memory{where}: {asked_text}; {limit}{free}"


def details(p: int, note: dict[str, Any]) -> str:
    """The largest live arrays on the device, and what to try."""
    arrays = note.get("arrays")
    device = note.get("device")
    lines = []
    if arrays:
        on = device["name"] if device else "the device"
        lines.append(f"Largest live arrays on {on} of {label(p)} ({note.get('array_count', len(arrays))} "
                     f"arrays, {human_bytes(note.get('array_bytes'))} in all):")
        lines += ["  " + ln for ln in columns([ARRAY_HEAD[:-1], *(array_cells(r)[:-1] for r in arrays)])]
    elif arrays is None:
        lines.append(f"({label(p)} did not say which arrays it held: it did not answer in time.)")
    else:
        lines.append(f"{label(p)} held no live arrays on that device: the computation itself needs "
                     "the memory.")
    lines.append("What to try:")
    lines += [f"  - {s}" for s in suggestions(note)]
    return "\n".join(lines)


def suggestions(note: dict[str, Any]) -> list[str]:
    """What is typical to try, picked from what the arrays show (most telling first)."""
    arrays = note.get("arrays") or []
    total = note.get("array_bytes") or sum(r["bytes_per_device"] for r in arrays) or 0
    asked = note.get("requested") or 0
    notable = [r for r in arrays if total and r["bytes_per_device"] >= NOTABLE_SHARE * total]
    found = []
    copies = max((r.get("replicas", 1) for r in notable), default=1)
    replicated = [r for r in notable if r.get("replicas", 1) == copies > 1]
    if replicated:
        names = ", ".join(_name(r) for r in replicated[:3])
        found.append(f"shard {names}: replicated, {copies} devices each hold the same "
                     f"{human_bytes(replicated[0]['bytes_per_device'])}; a NamedSharding that splits "
                     f"it over their mesh axis (e.g. P('data', None)) keeps 1/{copies} as much per device")
    shapes: dict[tuple, list[dict[str, Any]]] = {}
    for r in notable:
        shapes.setdefault((tuple(r["shape"]), r["dtype"], r["sharding"]), []).append(r)
    twins = [pair for rows in shapes.values() for pair in _old_and_new(rows)]
    if twins:
        names = " and ".join(_name(r) for r in twins[0])
        found.append(f"donate buffers: {names} have the same shape and sharding (an old and a new "
                     "state?); `jax.jit(step, donate_argnums=0)` lets XLA reuse the old one's memory")
    if asked and asked >= max(total, 1) / 2:
        found.append("rematerialise: the failed allocation is large next to the live arrays, so the "
                     "computation's own temporaries (activations) fill the device; wrap layers in "
                     "`jax.checkpoint` (jax.remat) so the backward pass recomputes them")
        found.append("lower the per-process batch (and accumulate gradients over micro-batches to "
                     "keep the global batch)")
    if not found:
        found.append("lower the per-process batch, or shard the largest arrays over more devices")
    return found


#: Names that say a variable is the next (or the last) value of another: ``state``/``new_state``.
_NEXT = re.compile(r"^(?:new|next|old|prev|last)_|_(?:new|next|old|prev)$")


def _old_and_new(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of arrays alike that look like a value and its next one (``state``, ``new_state``;
    or one that no variable holds: an old buffer kept alive), not ``params`` and ``opt_state``."""

    def root(row: dict[str, Any]) -> tuple[str, str]:
        name = row.get("name") or ""
        head = re.match(r"[A-Za-z_]\w*", name)
        variable = head.group(0) if head else ""
        return _NEXT.sub("", variable), name[len(variable):]

    pairs = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if not a.get("name") or not b.get("name") or (a["name"] != b["name"] and root(a) == root(b)):
                pairs.append((a, b))
    return pairs


def _name(row: dict[str, Any]) -> str:
    name = row.get("name")
    return f"`{name}`" if name else f"the {row['dtype']}{list(row['shape'])} array"


def fold(traceback: str, texts: set[str]) -> str:
    """``traceback`` with XLA's long text cut to :data:`FOLD_LINES` lines."""
    for text in texts:
        lines = text.strip().splitlines()
        if len(lines) > FOLD_LINES and text.strip() in traceback:
            kept = "\n".join(lines[:FOLD_LINES])
            more = FOLDED.format(more=len(lines) - FOLD_LINES)
            traceback = traceback.replace(text.strip(), f"{kept}\n{more}")
    return traceback
