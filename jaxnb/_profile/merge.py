"""Merge the Chrome trace of every JAX process into one Perfetto trace, clocks aligned.

Pure Python on the JSON that ``jax.profiler`` writes beside each ``.xplane.pb``
(``<host>.trace.json.gz``: ``traceEvents`` with ``ph``/``pid``/``tid``/``ts`` in µs).
Each JAX process becomes one process group (pid ``I + 1``, named ``pI · host``); every
track of it (host threads, and device planes such as ``/device:GPU:0``, which each
process numbers from 0) becomes a thread of that group, named by plane and thread, so
no two processes' devices can land on one track.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
from typing import Any

#: The annotation the engines record right after the trace starts (see ``_engine.profiling``).
ANCHOR = "jaxnb.profile.anchor"


@dataclasses.dataclass
class ProcessTrace:
    """One process's trace and what ties its time to process 0's wall clock."""

    process: int
    host: str
    trace: dict[str, Any]
    #: Wall clock (this process's, ns) read inside the anchor annotation.
    anchor_ns: int
    #: Process 0's clock minus this process's, ns, and how well it is known.
    offset_ns: int = 0
    offset_error_ns: int = 0


def base_ns(t: ProcessTrace) -> tuple[int, float]:
    """(process 0's wall clock at this trace's ``ts = 0``, its uncertainty), in ns."""
    anchor = next((e for e in t.trace.get("traceEvents", []) if e.get("name") == ANCHOR), None)
    if anchor is None:  # no anchor (trace cut short): trust ts 0 as the anchor time
        return t.anchor_ns + t.offset_ns, float(t.offset_error_ns)
    mid_us = float(anchor["ts"]) + float(anchor.get("dur", 0.0)) / 2
    return (t.anchor_ns - round(mid_us * 1000) + t.offset_ns,
            float(anchor.get("dur", 0.0)) * 1000 / 2 + t.offset_error_ns)


def shifts_us(traces: list[ProcessTrace]) -> dict[int, float]:
    """µs to add to each process's ``ts`` so all share one time axis (earliest start = 0)."""
    bases = {t.process: base_ns(t)[0] for t in traces}
    origin = min(bases.values())
    return {p: (b - origin) / 1000 for p, b in bases.items()}


def alignment_error_ms(traces: list[ProcessTrace]) -> dict[int, float]:
    """How far off (at most, ms) each process's events may sit from process 0's on the merged axis."""
    errors = {t.process: base_ns(t)[1] for t in traces}
    ref = errors.get(0, 0.0)
    return {p: (e + (ref if p != 0 else 0.0)) / 1e6 for p, e in errors.items()}


def merge(traces: list[ProcessTrace]) -> dict[str, Any]:
    """One Chrome trace: a process group per JAX process, tracks kept apart, clocks aligned."""
    shift = shifts_us(traces)
    out: list[dict[str, Any]] = []
    for t in sorted(traces, key=lambda t: t.process):
        out.extend(regroup(t, shift[t.process]))
    return {"displayTimeUnit": "ns", "traceEvents": out}


def regroup(t: ProcessTrace, shift: float) -> list[dict[str, Any]]:
    """``t``'s events as process group ``t.process + 1``, every track its own tid, ``ts`` + ``shift``."""
    events = t.trace.get("traceEvents", [])
    pid = t.process + 1
    planes = {e["pid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "process_name" and "pid" in e}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and "tid" in e}
    tids: dict[tuple[Any, Any], int] = {}
    out: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"p{t.process} · {t.host}"}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": t.process}},
    ]

    def track(e: dict[str, Any]) -> int:
        key = (e.get("pid"), e.get("tid"))
        if key not in tids:
            tids[key] = len(tids) + 1
            plane = planes.get(key[0], f"plane {key[0]}")
            name = threads.get(key, f"thread {key[1]}") if key[1] is not None else "events"
            out.append({"ph": "M", "pid": pid, "tid": tids[key], "name": "thread_name",
                        "args": {"name": f"{plane} {name}"}})
            out.append({"ph": "M", "pid": pid, "tid": tids[key], "name": "thread_sort_index",
                        "args": {"sort_index": len(tids)}})
        return tids[key]

    for e in events:
        if "ph" not in e or e.get("ph") == "M":
            continue
        new = dict(e)
        new["pid"] = pid
        new["tid"] = track(e)
        if "ts" in new:
            new["ts"] = float(new["ts"]) + shift
        for key in ("id", "bind_id"):
            if key in new:
                new[key] = f"p{t.process}:{new[key]}"
        out.append(new)
    return out


def add_steps(trace: dict[str, Any], anchor_ns: int, steps_ns: list[tuple[int, int, int]]) -> None:
    """Put the report-to-report steps into a process's trace as step events (``step_num``),
    on the track of the anchor annotation (the Python thread that runs the training)."""
    events = trace.setdefault("traceEvents", [])
    anchor = next((e for e in events if e.get("name") == ANCHOR), None)
    if anchor is None:
        return
    mid_us = float(anchor["ts"]) + float(anchor.get("dur", 0.0)) / 2
    for step, begin, end in steps_ns:
        events.append({"ph": "X", "pid": anchor["pid"], "tid": anchor["tid"], "name": "jaxnb step",
                       "ts": mid_us + (begin - anchor_ns) / 1000, "dur": (end - begin) / 1000,
                       "args": {"step_num": str(step)}})


def join_parts(parts: list[str], path: str) -> None:
    """Write the merged trace ``path`` from the processes' parts (gzipped fragments of events,
    each already regrouped and shifted by its process), without parsing them; remove the parts."""
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b'{"displayTimeUnit":"ns","traceEvents":[')
        first = True
        for part in parts:
            with gzip.open(part, "rb") as f:
                head = f.read(1)
                if not head:
                    continue
                if not first:
                    out.write(b",")
                out.write(head)
                shutil.copyfileobj(f, out, 1 << 20)
                first = False
        out.write(b"]}")
    for part in parts:
        os.remove(part)
