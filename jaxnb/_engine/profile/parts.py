"""Each process's share of ``%%jax_profile``'s merge, done on the engines in parallel.

After the trace stopped, every process reads its own Chrome trace, adds the step times
(:mod:`.trace_events`), agrees with the others on one time origin (the earliest
aligned trace start, through the coordination service's key-value store) and rewrites
its events as its own process group on that time axis (:func:`trace_events.regroup`).
The notebook then only joins the parts: it never parses a whole trace, so the time from
the end of the cell to the table does not grow with the number of processes.
Pure Python and the standard library besides the coordination client.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from typing import Any

from jaxnb._engine import jax_internals
from jaxnb._engine.profile import trace_events as trace

#: Step windows sent for the timeline picture (it draws the last 3 that all processes have).
SHOWN_STEPS = 5

#: Seconds a process waits for the others' time origins before it uses the ones it has.
ORIGIN_WAIT_S = 5.0


def prepare(process: int, count: int, started: dict[str, Any], stopped: dict[str, Any],
            steps_ns: list[tuple[int, int, int]] | None = None) -> dict[str, Any]:
    """Write this process's part of the merged trace; its step rows and timeline data.

    Returns ``part`` (a gzipped JSON fragment: events separated by commas) and its
    ``part_size``, ``rows`` (see :func:`trace_events.step_times`), ``error_ns``
    (how far its events may sit off process 0's clock) and ``timeline`` (its last step
    windows and the device ops in them, on the merged time axis).
    """
    with gzip.open(stopped["trace"], "rt") as f:
        chrome = json.load(f)
    if steps_ns:
        trace.add_steps(chrome, int(stopped["anchor_ns"]), steps_ns)
    own = trace.ProcessTrace(process, stopped["host"], chrome, int(stopped["anchor_ns"]),
                             int(started.get("offset_ns", 0)), int(started.get("offset_error_ns", 0)))
    base, error = trace.base_ns(own)
    origin = _agreed_origin(f"jaxnb/profile/{stopped['session']}/origin", process, count, base)
    shift = (base - origin) / 1000
    events = chrome.get("traceEvents", [])
    rows = trace.step_times(process, events)
    part = os.path.join(stopped["folder"], "part.json.gz")
    with gzip.open(part, "wt", compresslevel=1) as f:
        first = True
        for event in trace.regroup(own, shift):
            if not first:
                f.write(",")
            f.write(json.dumps(event, separators=(",", ":")))
            first = False
    return {"part": part, "part_size": os.path.getsize(part), "rows": rows, "error_ns": error,
            "timeline": _timeline(events, shift)}


def _agreed_origin(key: str, process: int, count: int, base: int) -> int:
    """The earliest aligned start among the processes that publish one within the wait."""
    client = jax_internals.distributed_client()
    if client is None or count == 1:
        return base
    client.key_value_set(f"{key}/{process}", str(base))
    deadline = time.monotonic() + ORIGIN_WAIT_S
    found: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = dict(client.key_value_dir_get(f"{key}/"))
        if len(found) >= count:
            break
        time.sleep(0.01)
    return min([base, *(int(v) for v in found.values())])


def _timeline(events: list[dict[str, Any]], shift: float) -> dict[str, list]:
    """The last few step windows and the device ops inside them, shifted onto the merged axis."""
    windows = trace.step_windows(events) or trace.whole_window(events)
    shown = windows[-SHOWN_STEPS:]
    if not shown:
        return {"steps": [], "ops": []}
    lo, hi = shown[0][1], shown[-1][2]
    ops = []
    for e in events:
        if trace.is_op(e):
            a = float(e["ts"])
            b = a + float(e.get("dur", 0.0))
            if b >= lo and a <= hi:
                ops.append((a + shift, b + shift, trace.is_collective(e)))
    return {"steps": [(s, a + shift, b + shift) for s, a, b in shown], "ops": ops}
