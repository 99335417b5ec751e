"""What named clusters run on this machine (``%jax_cluster list``, ``python -m jaxnb list``)."""

from __future__ import annotations

import os
import time
from typing import Any

from jaxnb._attach import record, runs
from jaxnb._core import cluster_names as names

LIVE_UNHELD = ("run {run!r} in {dir} is live on cluster {cluster!r}, which no kernel holds (the "
               "kernel that started it is gone); `%jax_cluster attach {cluster}` then "
               "`%jax_train --attach --name {run}` follows or stops it; or pass --name NEW for a "
               "new run")


def clusters() -> list[dict[str, Any]]:
    """One dict per named cluster running on this machine: ``name``, ``processes`` (how many),
    ``hosts``, ``runs`` (its runs and searches, oldest first: each ``name``, ``kind`` "run" or
    "search", ``state`` as read from its folder, ``folder``), ``attached`` (the pid of the kernel
    attached, or ``None``), ``idle_since`` (``time.time()`` since when no kernel is attached and
    nothing runs, or ``None``) and ``idle_timeout``. Records of supervisors that are gone are
    removed."""
    found = []
    for name in names.recorded_names():
        own = record.read(names.supervisor_path(name)) or {}
        if not record.alive(own.get("supervisor")):
            record.remove(names.supervisor_path(name))
            continue
        doc = record.read(names.record_path(name)) or {}
        kernel = doc.get("kernel") or {}
        attached = kernel.get("pid") if record.alive(kernel) else None
        found.append({
            "name": name,
            "processes": len(doc.get("processes") or []),
            "hosts": list(doc.get("hosts") or []),
            "runs": [dict(name=r["name"], kind=r.get("kind", runs.RUN), state=runs.state(r),
                          folder=r.get("folder")) for r in doc.get("runs") or []
                     if isinstance(r, dict) and isinstance(r.get("name"), str)],
            "attached": attached,
            "idle_since": None if attached is not None or own.get("busy") else (
                own.get("idle_since") or doc.get("detached_at") or time.time()),
            "idle_timeout": own.get("idle_timeout"),
        })
    return found


def left_running(name: str) -> bool:
    """Whether named cluster ``name`` runs on this machine with no live kernel attached."""
    own = record.read(names.supervisor_path(name)) or {}
    if not record.alive(own.get("supervisor")):
        return False
    doc = record.read(names.record_path(name)) or {}
    return not record.alive(doc.get("kernel"))


def refuse_if_live_without_kernel(folder: str) -> None:
    """``FileExistsError`` when the run in ``folder`` may still run on a cluster of this machine
    that no kernel holds (the kernel that started it died: its lock went with it, the engines
    may train on). Only once the cluster's supervisor found its engines idle is the run free."""
    target = os.path.realpath(folder)
    for name in names.recorded_names():
        own = record.read(names.supervisor_path(name)) or {}
        doc = record.read(names.record_path(name)) or {}
        if not record.alive(own.get("supervisor")) or record.alive(doc.get("kernel")):
            continue  # gone, or a kernel holds it (and the run's lock)
        if own.get("idle_since") is not None and not own.get("busy"):
            continue  # its supervisor found nothing running there
        for entry in doc.get("runs") or []:
            if (isinstance(entry, dict) and entry.get("kind", runs.RUN) == runs.RUN
                    and isinstance(entry.get("folder"), str)
                    and os.path.realpath(entry["folder"]) == target
                    and runs.state(entry) in ("running", "starting")):
                raise FileExistsError(LIVE_UNHELD.format(
                    run=entry.get("name"), dir=os.path.dirname(target), cluster=name))


def table(rows: list[dict[str, Any]], where: str = "this machine") -> str:
    """The clusters as a plain text table (one line each), or a line saying there are none
    (``where``: the machine they run on, as the line names it)."""
    if not rows:
        return (f"jaxnb: no cluster to attach runs on {where} (a script's unnamed cluster ends "
                "with the script)")
    lines = [f"{'NAME':<16} {'PROCESSES':>9}  {'HOSTS':<20} {'STATE':<40} RUNS"]
    for row in rows:
        if row["attached"] is not None:
            state = f"attached (kernel pid {row['attached']})"
        elif row["idle_since"]:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["idle_since"]))
            state = f"idle since {since}"
        else:
            state = "no kernel attached; busy"
        shown = ", ".join(f"{r['name']} ({'search, ' if r['kind'] == runs.SEARCH else ''}"
                          f"{r['state']})" for r in row["runs"])
        lines.append(f"{row['name']:<16} {row['processes']:>9}  {','.join(row['hosts']):<20} "
                     f"{state:<40} {shown or '-'}")
    return "\n".join(lines)
