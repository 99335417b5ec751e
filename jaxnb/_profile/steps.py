"""Per-step times of each process from its trace, and the straggler with the cause of its delay.

A step is a ``jax.profiler.StepTraceAnnotation`` event (any name; it carries
``step_num``). Without one, the whole traced cell counts as step 0. Inside a step:

- ``compute_ms``: wall time while at least one device runs an XLA op that is not a
  collective (XLA op events are the ones carrying ``hlo_op``);
- ``collective_ms``: time while devices run only collectives (all-reduce, all-gather, …),
  which includes waiting for the other processes to arrive;
- ``host_ms``: the rest of the step (Python, dispatch, data loading: no device busy).

So ``total = compute + collective + host``. Processes that synchronise every step have
about the same totals; the one the others wait for is the one that spends the most time
*not* waiting (``total − collective``). That process is the straggler when its median
stands out from the others' by :data:`MIN_EXTRA_MS` and :data:`MIN_EXTRA_FRACTION`.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

COLLECTIVE = re.compile(
    r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast"
    r"|\bsend\b|\brecv\b|^send|^recv|psum|allreduce|allgather",
    re.IGNORECASE,
)
MIN_EXTRA_MS = 1.0
MIN_EXTRA_FRACTION = 0.2
PARTS = ("compute_ms", "collective_ms", "host_ms")
_WHAT = {"compute_ms": "compute (XLA ops)", "collective_ms": "collective wait",
         "host_ms": "host/Python time"}


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


def medians(steps: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per process, the median of each time over the steps every process recorded."""
    by_process: dict[int, dict[int, dict[str, Any]]] = {}
    for row in steps:
        by_process.setdefault(row["process"], {})[row["step"]] = row
    common = set.intersection(*(set(s) for s in by_process.values())) if by_process else set()
    out = {}
    for p, rows in by_process.items():
        chosen = [rows[s] for s in sorted(common)] or list(rows.values())
        out[p] = {k: statistics.median(r[k] for r in chosen) for k in ("total_ms", *PARTS)}
    return out


def straggler(steps: list[dict[str, Any]]) -> tuple[int | None, str | None]:
    """(the process the others wait for, which part of its step holds them up), or (None, None)."""
    med = medians(steps)
    if len(med) < 2:
        return None, None
    busy = {p: m["total_ms"] - m["collective_ms"] for p, m in med.items()}
    slowest = max(busy, key=lambda p: busy[p])
    others = [busy[p] for p in busy if p != slowest]
    typical = statistics.median(others)
    extra = busy[slowest] - typical
    if extra < MIN_EXTRA_MS or extra < MIN_EXTRA_FRACTION * max(typical, 1e-9):
        return None, None
    excess = {k: med[slowest][k] - statistics.median(med[p][k] for p in med if p != slowest)
              for k in ("compute_ms", "host_ms")}
    cause = max(excess, key=lambda k: excess[k])
    return slowest, cause


def explain(steps: list[dict[str, Any]]) -> str:
    """One line: who the straggler is and where its extra time goes."""
    slowest, cause = straggler(steps)
    if slowest is None or cause is None:
        return "no straggler: every process is within 20% (or 1 ms) of the others"
    med = medians(steps)
    others = [p for p in med if p != slowest]
    more = med[slowest][cause] - statistics.median(med[p][cause] for p in others)
    waited = statistics.median(med[p]["collective_ms"] for p in others)
    return (f"straggler: p{slowest} — {more:.1f} ms more {_WHAT[cause]} per step than the others "
            f"(median), who wait {waited:.1f} ms per step in collectives")


def describe(part: str) -> str:
    """The words for ``compute_ms``, ``collective_ms`` or ``host_ms``."""
    return _WHAT[part]
