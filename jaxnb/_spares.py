"""Warm spares: engines started, JAX imported, registered, not joined — a restart only joins.

A local cluster keeps one spare engine per process (``spares``; 0 turns them
off). A restart that finds enough spares registered SIGKILLs the group's old
engines, joins the spares into a new ``jax.distributed`` group (new processes,
empty namespaces: the same as a full restart for the user) and starts new spares
in the background; the controller stays. Without enough spares ready, the
restart stops and starts everything as before. Engines on ``--hosts`` get no
spares yet.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psutil

from jaxnb import _ipp, _startup
from jaxnb._contract import EngineCall
from jaxnb._failures import detect
from jaxnb._state import Group

_PIDS = EngineCall("jaxnb._engine.process:pids")

#: How long the old engines get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 5.0


def wanted(group: Group) -> int:
    """How many spares ``group`` keeps (local clusters only)."""
    if not group.options.is_local:
        return 0
    chosen = group.options.spares
    return group.options.resolved_n() if chosen is None else chosen


def top_up(group: Group) -> None:
    """Start spares until ``group`` has :func:`wanted` of them (they register on their own)."""
    missing = wanted(group) - len(_alive(group, group.spare_pids))
    if missing <= 0 or group.ipp is None or group.engine_env is None:
        return
    before = set(_ipp.launched_engines(group.ipp))
    group.ipp.start_engines_sync(n=missing, environment=dict(group.engine_env))
    started = set(_ipp.launched_engines(group.ipp)) - before
    group.spare_pids.update(started)
    group.launchers.update(_ipp.launched_engines(group.ipp))


def ready(group: Group) -> list[int]:
    """Engine ids of the registered, living spares, as many as the group has processes."""
    if group.client is None or not group.spare_pids:
        return []
    members = {info.engine_id for info in group.processes}
    candidates = [eid for eid in group.client.ids if eid not in members]
    if len(candidates) < group.size:
        return []
    try:
        pids = group.client[candidates].apply_async(_PIDS).get(timeout=5)
    except Exception:  # a spare died or is still starting: restart the slow way
        return []
    alive = _alive(group, group.spare_pids)
    found = [eid for eid, family in zip(candidates, pids, strict=True) if family[0] in alive]
    return found[: group.size] if len(found) >= group.size else []


def swap(group: Group) -> bool:
    """Replace the group's engines by spares and join them; False when too few are ready."""
    spares = ready(group)
    if not spares:
        return False
    old = [info.pid for info in group.processes]
    _kill(old)
    group.spare_pids.difference_update(_spare_pids_of(group, spares))
    group.view = group.client[spares]
    group.view.block = False
    group.processes = []
    group.suspect, group.group_cut, group.busy_with, group.current_run = None, False, None, None
    _startup.join_group(group)
    group.spare_pids.difference_update(info.pid for info in group.processes)
    top_up(group)
    return True


def _spare_pids_of(group: Group, engine_ids: list[int]) -> set[int]:
    with contextlib.suppress(Exception):
        pids = group.client[engine_ids].apply_async(_PIDS).get(timeout=5)
        return {family[0] for family in pids}
    return set()


def _alive(group: Group, pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        launcher = detect.launcher_of(group, pid)
        process = _ipp.launcher_process(launcher) if launcher is not None else None
        if process is not None and not detect.has_exited(process):
            alive.add(pid)
    return alive


def _kill(pids: list[int]) -> None:
    processes: list[Any] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            process.kill()
            processes.append(process)
    detect.wait_gone(processes, KILL_WAIT_SECONDS)
