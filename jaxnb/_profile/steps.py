"""From the per-step rows of every process: medians, the straggler and the cause of its delay.

The rows come from the engines (``jaxnb._engine.profile.trace_events.step_times``): ``total_ms =
compute_ms + collective_ms + host_ms`` per process and step. Processes that synchronise
every step have about the same totals; the one the others wait for is the one that spends
the most time *not* waiting (``total − collective``). That process is the straggler when
its median stands out from the others' by :data:`MIN_EXTRA_MS` and :data:`MIN_EXTRA_FRACTION`.
"""

from __future__ import annotations

import statistics
from typing import Any

MIN_EXTRA_MS = 1.0
MIN_EXTRA_FRACTION = 0.2
PARTS = ("compute_ms", "collective_ms", "host_ms")
_WHAT = {"compute_ms": "compute (XLA ops)", "collective_ms": "collective wait",
         "host_ms": "host/Python time"}


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
