"""The runs and searches of a named cluster, kept in its record (``runs``: name, kind, folder,
since when), so that ``list`` shows them and a kernel that attaches finds their folders.

Their state is read from their folders, never from the kernel that started them (it may be
gone): a run's from the end of its ``reports.jsonl`` (:mod:`jaxnb._core.run_reports`), a
search's from its study's lock file (the kernel that drives it holds it and wrote its pid
there; a search that ended cleanly emptied it). No Optuna, no JAX: ``python -m jaxnb list``
stays light.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jaxnb._core import run_reports
from jaxnb._core.file_lock import holder

#: The runs a record keeps (the newest).
KEEP = 20
#: The end of a ``reports.jsonl`` read for its state (its last lines).
TAIL_BYTES = 65536
RUN, SEARCH = "run", "search"
#: The file a search's kernel holds locked (``jaxnb._tune.lease.LOCK_FILE``).
SEARCH_LOCK = "search.lock"


def added(runs: Any, name: str, folder: str, kind: str) -> list[dict[str, Any]]:
    """``runs`` (a record's list) with run ``name`` in ``folder`` at its end (once per folder)."""
    kept = [r for r in (runs if isinstance(runs, list) else [])
            if isinstance(r, dict) and r.get("folder") != folder]
    kept.append({"name": name, "kind": kind, "folder": folder, "since": time.time()})
    return kept[-KEEP:]


def folder_of(runs: Any, name: str) -> str | None:
    """The folder of the newest run or search called ``name`` in a record's list, if any."""
    for entry in reversed(runs if isinstance(runs, list) else []):
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(
                entry.get("folder"), str) and os.path.isabs(entry["folder"]):
            return str(entry["folder"])
    return None


def state(entry: dict[str, Any]) -> str:
    """What a run or search is doing now: ``running``, ``done``, ``failed``, ``stopped``,
    ``starting``; a search also ``ended`` or ``not driven`` (its kernel is gone: ``--resume``)."""
    folder = str(entry.get("folder") or "")
    if entry.get("kind") == SEARCH:
        if not os.path.isdir(folder):  # (before reading its lock: that would make the folder)
            return "starting"
        held = holder(os.path.join(folder, SEARCH_LOCK))
        if not held.pid:
            return "ended"
        return "running" if held.alive_here() else "not driven"
    return run_state(run_reports.path(folder))


def run_state(file: str) -> str:
    """A run's state from the last lines of its ``reports.jsonl``."""
    try:
        with open(file, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            lines = f.read().splitlines()
    except OSError:
        return "starting"
    for raw in reversed(lines):
        try:
            event = json.loads(raw)
        except ValueError:  # cut by the seek, or by a crash
            continue
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind == "end" and event.get("resized_at") is None:
            return "failed" if event.get("error") else "stopped" if event.get("stopped") else "done"
        if kind in ("start", "report", "end"):
            return "running"
    return "running" if lines else "starting"
