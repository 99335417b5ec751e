"""Is every process alive? The one liveness check of the notebook side.

Local engines are children of the notebook kernel (started by ipyparallel's
launchers): their exit is read from the process itself (:mod:`jaxnb._hosts.processes`).
Engines elsewhere are alive while they are registered with the controller
(which drops one after its heartbeats stop); their site says how a lost one
ended (:mod:`jaxnb._hosts.site`).
"""

from __future__ import annotations

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.state import Group
from jaxnb._hosts import oom_killer, processes, site

#: When each engine this process did not start was first seen running (``time.time()``), and
#: how those that ended did: its exit status went with the process that started it.
_STARTED: dict[int, float] = {}
_ENDED: dict[int, str] = {}


def dead_processes(group: Group) -> dict[int, str]:
    """JAX process index → how it ended, for every process of ``group`` that is not running."""
    dead: dict[int, str] = {}
    where = site.of(group)
    for info in group.processes:
        launcher = processes.launcher_of(group, info.pid)
        process = ipp_internals.launcher_process(launcher) if launcher is not None else None
        if process is not None:
            how = processes.exit_of(process, launcher)
        elif where.inspects_processes:  # not our child: a kernel or supervisor that attached
            how = ended_elsewhere(info.pid)
        else:
            how = None
        if how is not None and info.pid in group.stopped_pids:
            how = site.STOPPED
        if how is not None:
            dead[info.process_index] = how
    for p, how in where.exited(group).items():  # seen on its host before the controller drops it
        dead.setdefault(p, how)
    if where.lost_by_registration and group.client is not None:
        registered = set(group.client.ids)
        gone = [i.process_index for i in group.processes
                if i.engine_id not in registered and i.process_index not in dead]
        if gone:  # asked where they ran (killed, or their host unreachable)
            explained = where.explain_lost(group, gone)
            for p in gone:
                dead[p] = explained.get(p, "unregistered from the controller")
    return dead


def ended_elsewhere(pid: int) -> str | None:
    """``None`` while ``pid`` (an engine another process started) runs; once it is gone, an OOM
    kill when this host's kernel log names it since it was last seen running, else ``exited``
    (its exit status went with the process that started it, or that process reaped it)."""
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        started = None
    except psutil.Error:  # there, but not ours to read
        return None
    if started is not None:
        _STARTED[pid] = started  # the process at this pid now: the one whose end is read later
        _ENDED.pop(pid, None)
        return None
    if pid not in _ENDED:  # read once: the kernel log is not read at every look
        seen = _STARTED.get(pid)  # never seen running: an older kill of a reused pid must not count
        killed = seen is not None and oom_killer.killed_here(pid, seen)
        _ENDED[pid] = oom_killer.KILLED if killed else "exited"
    return _ENDED[pid]
