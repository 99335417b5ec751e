"""Is every process alive? The one liveness check of the notebook side.

Local engines are children of the notebook kernel (started by ipyparallel's
launchers): their exit is read from the process itself. Remote engines are
alive while they are registered with the controller (which drops one after
its heartbeats stop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.state import Group
from jaxnb._hosts import remote


def dead_processes(group: Group) -> dict[int, str]:
    """JAX process index → how it ended, for every process of ``group`` that is not running."""
    dead: dict[int, str] = {}
    for info in group.processes:
        launcher = launcher_of(group, info.pid)
        process = ipp_internals.launcher_process(launcher) if launcher is not None else None
        if process is not None:
            how = exit_of(process)
            if how is not None:
                dead[info.process_index] = how
    if not group.options.is_local and group.client is not None:
        registered = set(group.client.ids)
        gone = [i.process_index for i in group.processes
                if i.engine_id not in registered and i.process_index not in dead]
        if gone:  # engines on --hosts: asked on their hosts (killed, or the host unreachable)
            explained = remote.explain_lost(group, gone)
            for p in gone:
                dead[p] = explained.get(p, "unregistered from the controller")
    return dead


def launcher_of(group: Group, pid: int) -> Any:
    """The ipyparallel launcher of the local engine ``pid`` (``None`` for remote engines).

    Kept in ``group.launchers`` once seen: ipyparallel forgets a launcher as soon
    as its process exits, which is exactly when jaxnb needs it.
    """
    launcher = group.launchers.get(pid)
    if launcher is None:
        launcher = ipp_internals.launched_engines(group.ipp).get(pid)
        if launcher is not None:
            group.launchers[pid] = launcher
    return launcher


def exit_of(process: psutil.Process) -> str | None:
    """``None`` while ``process`` runs; else how it ended (signal name or exit status)."""
    if not has_exited(process):
        return None
    code = None
    for _ in range(10):  # ipyparallel's launcher thread may be reaping it right now
        try:
            code = process.wait(timeout=0)
        except (psutil.TimeoutExpired, psutil.Error, ChildProcessError):
            code = None
        if code is not None:
            break
        time.sleep(0.02)
    if code is None:
        return "exited"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def has_exited(process: psutil.Process) -> bool:
    """True once ``process`` has ended; a zombie counts as ended."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE or not process.is_running()
    except psutil.NoSuchProcess:
        return True


def gone(process: psutil.Process) -> bool:
    """Ended and reaped: our own zombie children are reaped here; others' are init's."""
    try:
        if process.status() != psutil.STATUS_ZOMBIE:
            return False
        if process.ppid() != os.getpid():
            return True
    except psutil.NoSuchProcess:
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)
    return not psutil.pid_exists(process.pid)


def wait_gone(processes: list[psutil.Process], seconds: float, poll: float = 0.005) -> list:
    """Wait up to ``seconds`` until every process is gone; those still there."""
    deadline = time.monotonic() + seconds
    left = [p for p in processes if not gone(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll)
        left = [p for p in left if not gone(p)]
    return left
