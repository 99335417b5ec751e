"""What a run's driver writes in ``RUN/reports.jsonl`` beside process 0's events
(:mod:`jaxnb._core.run_reports`): each recovery (``failure``) and, for a run that recovers, its
final ``end``. The kernel's driver and the supervisor's (:mod:`jaxnb._cluster_driving`) write the
same events, so a kernel that attaches later sees every recovery in ``Result.failures``.

A ``start`` of a run that recovers says ``recovers``; process 0's ``end`` is then not the run's
end (a death elsewhere may still be recovered from): only the driver's ``end`` (``final``) is.
JSON only, one line per event, appended between attempts (no engine writes then).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from jaxnb._core import run_reports
from jaxnb._core.safe_files import open_text
from jaxnb._train.result import Failure

_FIELDS = {f.name for f in dataclasses.fields(Failure)}


def append(run_dir: str, *events: dict[str, Any]) -> None:
    """Append ``events`` to the run's file and sync it (said on stderr when it cannot be)."""
    try:
        with open_text(run_reports.path(run_dir), "a", within=run_dir) as f:
            f.write("".join(run_reports.line(e) for e in events))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # the run goes on; only a kernel attaching later misses this
        print(f"jaxnb: could not write to {run_reports.path(run_dir)}: {exc}", file=sys.stderr)


def failure_event(failure: Failure) -> dict[str, Any]:
    """The ``failure`` event of one recovery."""
    return {"kind": "failure", **dataclasses.asdict(failure)}


def final_end(error: str | None, stopped: bool = False, stopped_at: int | None = None) -> dict[str, Any]:
    """The driver's ``end`` of a run that recovers: the run's own end, whatever came before."""
    return {"kind": "end", "final": True, "time": time.time(), "error": error,
            "stopped": stopped, "stopped_at": stopped_at, "resized_at": None}


def failure_of(event: dict[str, Any]) -> Failure | None:
    """The :class:`Failure` an event holds, or ``None`` when it does not hold one."""
    fields = {k: v for k, v in event.items() if k in _FIELDS}
    try:
        failure = Failure(**fields)
        failure.time, failure.cause = float(failure.time), str(failure.cause)
        failure.processes = tuple(int(p) for p in failure.processes)
        failure.phases = {str(k): float(v) for k, v in dict(failure.phases or {}).items()}
    except (TypeError, ValueError):
        return None
    for name in ("step", "resumed_from", "old_size", "new_size"):
        if not isinstance(getattr(failure, name), (int, type(None))):
            return None
    return failure


def failures_in(run_dir: str) -> list[Failure]:
    """The recoveries the run's file records, in order."""
    return [f for e in run_reports.Tail(run_reports.path(run_dir)).read()
            if e.get("kind") == "failure" and (f := failure_of(e)) is not None]
