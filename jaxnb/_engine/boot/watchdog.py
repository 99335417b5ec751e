"""Make every process jaxnb launched exit when the notebook kernel that launched it is gone
(for a named cluster: when its supervisor is, :mod:`jaxnb._attach.supervisor`).

Runs on its own thread, so it fires even while an engine's main thread is busy
computing or blocked in a collective. When the kernel disappears (even after
SIGKILL), an engine removes the key files, stops the controller's whole process
group and exits; the controller (see :mod:`jaxnb._engine.boot.controller`) does the
same for itself and its scheduler processes, in case no engine is left to do it.
Remote engines' ipyparallel nanny processes exit on their own once their engine is gone
(local engines run without one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from jaxnb._core.contract import (
    ENV_CLEANUP_FILES,
    ENV_CONTROLLER_PID,
    ENV_PARENT_ONLY,
    ENV_PARENT_PID,
)

POLL_SECONDS = 1.0
#: Exit status of an engine that stopped because its kernel is gone.
ORPHAN_EXIT_STATUS = 70


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (dead, not yet reaped by its parent) does not. A kernel
    SIGKILLed just after it launched an engine, before the engine's watchdog started, is seen
    so: the engine, already re-parented, would otherwise wait for the zombie to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:  # no /proc (not Linux): kill(pid, 0) has to do
        return False
    return stat[stat.rfind(b")") + 2:][:1] == b"Z"  # the state follows "(name) "


def _orphaned(parent_pid: int, original_ppid: int | None) -> bool:
    return not _alive(parent_pid) or (original_ppid is not None and os.getppid() != original_ppid)


def remove_paths(paths: list[str]) -> None:
    """Delete files and folders, ignoring those already gone."""
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def kill_group(pid: int) -> None:
    """SIGKILL ``pid`` and, when it leads a process group, the whole group."""
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _engine_exit(controller_pid: int | None, paths: list[str]) -> None:
    remove_paths(paths)
    if controller_pid:
        kill_group(controller_pid)
    from jaxnb._engine.boot import stack_dumps

    stack_dumps.remove()
    os._exit(ORPHAN_EXIT_STATUS)


def _controller_exit(paths: list[str]) -> None:
    remove_paths(paths)
    kill_group(os.getpid())  # this process and its schedulers (it leads their group)
    os._exit(ORPHAN_EXIT_STATUS)


def _watch(parent_pid: int, original_ppid: int | None, on_orphan: Callable[..., None], *args: Any) -> None:
    while not _orphaned(parent_pid, original_ppid):
        time.sleep(POLL_SECONDS)
    on_orphan(*args)


def _settings() -> tuple[int, list[str]] | None:
    parent = os.environ.get(ENV_PARENT_PID)
    if not parent:
        return None
    paths = [f for f in os.environ.get(ENV_CLEANUP_FILES, "").split(os.pathsep) if f]
    return int(parent), paths


def _start(parent_pid: int, on_orphan: Callable[..., None], *args: Any) -> None:
    thread = threading.Thread(
        target=_watch,
        # A named cluster's supervisor is watched alone: the kernel that launched this may go.
        args=(parent_pid, None if os.environ.get(ENV_PARENT_ONLY) else os.getppid(), on_orphan,
              *args),
        name="jaxnb-watchdog",
        daemon=True,
    )
    thread.start()


def start_from_env() -> None:
    """In an engine: start the watchdog when ``JAXNB_PARENT_PID`` names the launching kernel."""
    settings = _settings()
    if settings is None:
        return
    parent, paths = settings
    controller = os.environ.get(ENV_CONTROLLER_PID)
    controller_pid = int(controller) if controller else None
    _start(parent, _engine_exit, controller_pid, paths)


def start_for_controller() -> None:
    """In the controller: the same watchdog, stopping the controller's process group."""
    settings = _settings()
    if settings is None:
        return
    parent, paths = settings
    _start(parent, _controller_exit, paths)
