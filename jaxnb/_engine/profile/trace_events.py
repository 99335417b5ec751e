"""One process's trace (the Chrome trace JSON ``jax.profiler`` writes): its steps and times,
its place on the merged time axis, and its events as one process group of the merged trace.

Engine side (``%%jax_profile``: each process prepares its own part, see :mod:`.parts`);
pure Python on dicts, so the unit tests run it on small recorded traces.

A step is a ``jax.profiler.StepTraceAnnotation`` event (any name; it carries
``step_num``). Without one, the whole traced cell counts as step 0. Inside a step:
``compute_ms`` is wall time while at least one device runs an XLA op that is not a
collective (XLA op events are the ones carrying ``hlo_op``); ``collective_ms`` is time
while devices run only collectives (all-reduce, all-gather, …), which includes waiting for
the other processes; ``host_ms`` is the rest (Python, dispatch, data loading). So
``total = compute + collective + host``.

In the merged trace each JAX process is one process group (pid ``I + 1``, named
``pI · host``); every track of it (host threads, and device planes such as
``/device:GPU:0``, which each process numbers from 0) becomes a thread of that group,
named by plane and thread, so no two processes' devices can land on one track.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

#: The annotation the engines record right after the trace starts (see ``_engine.profile.recording``).
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


COLLECTIVE = re.compile(
    r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast"
    r"|\bsend\b|\brecv\b|^send|^recv|psum|allreduce|allgather",
    re.IGNORECASE,
)


def step_windows(events: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """(step, start µs, end µs) of each step annotation (the first event of each step number)."""
    found: dict[int, tuple[float, float]] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and "step_num" in args:
            try:
                step = int(args["step_num"])
            except (TypeError, ValueError):
                continue
            start = float(e["ts"])
            found.setdefault(step, (start, start + float(e.get("dur", 0.0))))
    return sorted((s, a, b) for s, (a, b) in found.items())


def whole_window(events: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """The whole trace as step 0 (for a cell without step annotations)."""
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
             for e in events if e.get("ph") == "X" and "ts" in e]
    if not spans:
        return []
    return [(0, min(a for a, _ in spans), max(b for _, b in spans))]


def is_op(e: dict[str, Any]) -> bool:
    """An XLA op run on a device (CPU, GPU or TPU): an event that names its ``hlo_op``."""
    return e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})


def is_collective(e: dict[str, Any]) -> bool:
    """An op that exchanges data between devices (and so waits for the slowest one)."""
    return bool(COLLECTIVE.search(str((e.get("args") or {}).get("hlo_op", e.get("name", "")))))


def step_times(process: int, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per step of this process: ``process``, ``step``, ``total_ms``, ``compute_ms``,
    ``collective_ms``, ``host_ms``."""
    windows = step_windows(events) or whole_window(events)
    ops = sorted(((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), is_collective(e))
                  for e in events if is_op(e)), key=lambda o: o[0])
    rows = []
    for step, start, end in windows:
        inside = [(max(a, start), min(b, end), c) for a, b, c in ops if a < end and b > start]
        busy = _union([(a, b) for a, b, _ in inside])
        compute = _union([(a, b) for a, b, c in inside if not c])
        total = end - start
        rows.append({
            "process": process,
            "step": step,
            "total_ms": total / 1000,
            "compute_ms": compute / 1000,
            "collective_ms": (busy - compute) / 1000,
            "host_ms": (total - busy) / 1000,
        })
    return rows


def _union(spans: list[tuple[float, float]]) -> float:
    """Length covered by the union of ``spans``."""
    covered, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered
