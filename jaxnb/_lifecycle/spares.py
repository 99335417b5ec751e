"""Warm spares: engines started, JAX imported, registered, not joined — a restart only joins.

A local cluster keeps one spare engine per process (``spares``; 0 turns them
off). A restart that finds enough spares registered SIGKILLs the group's old
engines, joins the spares into a new ``jax.distributed`` group (new processes,
empty namespaces: the same as a full restart for the user) and starts new spares
in the background; the controller stays. Without enough spares ready, the
restart stops and starts everything as before. New spares start a few seconds
after a swap (importing JAX would slow the new group's first steps). Engines on
``--hosts`` get no spares yet.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.contract import EngineCall
from jaxnb._core.state import Group
from jaxnb._failures import processes
from jaxnb._lifecycle import startup

_PIDS = EngineCall("jaxnb._engine.process:pids")

#: How long the old engines get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: After a swap, new spares start this much later: importing JAX takes CPU that the
#: restarted group's first steps (compilation, restore) need more.
TOP_UP_DELAY_SECONDS = 5.0
_lock = threading.Lock()  # one top-up or swap at a time


def wanted(group: Group) -> int:
    """How many spares ``group`` keeps (local clusters only)."""
    if not group.options.is_local:
        return 0
    chosen = group.options.spares
    return group.options.resolved_n() if chosen is None else chosen


def top_up(group: Group) -> None:
    """Start spares until ``group`` has :func:`wanted` of them (they register on their own)."""
    with _lock:
        _top_up(group, group.ipp)


def top_up_later(group: Group, delay: float = TOP_UP_DELAY_SECONDS) -> None:
    """:func:`top_up` in ``delay`` seconds, unless the cluster was stopped meanwhile."""
    ipp_cluster = group.ipp

    def run() -> None:
        with _lock, contextlib.suppress(Exception):  # no spares: restarts take the slow way
            _top_up(group, ipp_cluster)

    timer = threading.Timer(delay, run)
    timer.daemon = True
    timer.start()


def _top_up(group: Group, ipp_cluster: Any) -> None:
    missing = wanted(group) - len(_alive(group, group.spare_pids))
    if missing <= 0 or ipp_cluster is None or group.ipp is not ipp_cluster or group.engine_env is None:
        return
    before = set(ipp_internals.launched_engines(ipp_cluster))
    ipp_cluster.start_engines_sync(n=missing, environment=dict(group.engine_env))
    started = set(ipp_internals.launched_engines(ipp_cluster)) - before
    group.spare_pids.update(started)
    group.launchers.update(ipp_internals.launched_engines(ipp_cluster))


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
    with _lock:
        swapped = _swap(group)
    if swapped:
        top_up_later(group)
    return swapped


def _swap(group: Group) -> bool:
    spares = ready(group)
    if not spares:
        return False
    old = [info.pid for info in group.processes]
    _kill(old)
    group.spare_pids.difference_update(_spare_pids_of(group, spares))
    group.view = group.client[spares]
    group.view.block = False
    group.processes = []
    group.clear_suspect()
    group.group_cut, group.busy_with, group.current_run = False, None, None
    startup.join_group(group)
    group.spare_pids.difference_update(info.pid for info in group.processes)
    return True


def _spare_pids_of(group: Group, engine_ids: list[int]) -> set[int]:
    with contextlib.suppress(Exception):
        pids = group.client[engine_ids].apply_async(_PIDS).get(timeout=5)
        return {family[0] for family in pids}
    return set()


def _alive(group: Group, pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        launcher = processes.launcher_of(group, pid)
        process = ipp_internals.launcher_process(launcher) if launcher is not None else None
        if process is not None and not processes.has_exited(process):
            alive.add(pid)
    return alive


def _kill(pids: list[int]) -> None:
    killed: list[Any] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            process.kill()
            killed.append(process)
    processes.wait_gone(killed, KILL_WAIT_SECONDS)
