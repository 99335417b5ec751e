"""Engines on this machine as processes: their launcher, whether and how they ended, waiting
until they are gone."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import time
from typing import Any

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.state import Group
from jaxnb._hosts import oom_killer


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


#: How long to wait for ipyparallel's launcher to note the exit status of a process it reaped.
STOP_DATA_SECONDS = 0.5
#: pid -> exit status (negative: the signal) of the children jaxnb reaped itself (:func:`gone`):
#: a process reaped is gone, and its status with it, for every other reader.
_REAPED: dict[int, int] = {}
#: How many such statuses are kept (the latest).
REAPED_KEPT = 256


def exit_of(process: psutil.Process, launcher: Any = None) -> str | None:
    """``None`` while ``process`` runs; else how it ended (signal name or exit status).

    The status is read from the process; when ipyparallel's launcher thread reaped it first
    (then the process is gone, and its status with it), from what that launcher noted
    (``launcher.stop_data``)."""
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
        code = _REAPED.get(process.pid)
    if code is None and launcher is not None:
        code = noted_exit(launcher)
    if code == -signal.SIGKILL and oom_killer.killed_here(process.pid, _started(process)):
        return oom_killer.KILLED
    return exit_text(code)


def noted_exit(launcher: Any, seconds: float = STOP_DATA_SECONDS) -> int | None:
    """The exit status ipyparallel's launcher noted when it reaped its process (it notes it
    on its event loop, just after): waits up to ``seconds`` for it."""
    deadline = time.monotonic() + seconds
    while True:
        data = getattr(launcher, "stop_data", None)
        code = data.get("exit_code") if isinstance(data, dict) else None
        if code is not None or time.monotonic() >= deadline:
            return code
        time.sleep(0.02)


def exit_text(code: int | None) -> str:
    """How a process with exit status ``code`` ended (negative: the signal that killed it)."""
    if code is None:
        return "exited"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _started(process: psutil.Process) -> float | None:
    """When ``process`` started (``time.time()``), or ``None`` once that cannot be known."""
    try:
        return process.create_time()
    except psutil.Error:
        return None


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
        pid, status = os.waitpid(process.pid, os.WNOHANG)
        if pid:  # keep its status: the cause of a death may be read after this
            _REAPED[pid] = os.waitstatus_to_exitcode(status)
            while len(_REAPED) > REAPED_KEPT:
                del _REAPED[next(iter(_REAPED))]
    return not psutil.pid_exists(process.pid)


def wait_gone(processes: list[psutil.Process], seconds: float, poll: float = 0.005) -> list:
    """Wait up to ``seconds`` until every process is gone; those still there."""
    deadline = time.monotonic() + seconds
    left = [p for p in processes if not gone(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll)
        left = [p for p in left if not gone(p)]
    return left


def wait_pids_gone(pids: list[int], seconds: float) -> None:
    """:func:`wait_gone` for the processes ``pids`` names (those already gone count as gone)."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    wait_gone(found, seconds, poll=0.01)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def launcher_log(launcher: object) -> str:
    """What the engine an ipyparallel launcher started wrote, colours removed."""
    return _ANSI.sub("", ipp_internals.launcher_output(launcher))


def launcher_process(launcher: object) -> psutil.Process | None:
    """The process an ipyparallel launcher started (``None`` if it started none)."""
    return ipp_internals.launcher_process(launcher)


def signal_main_thread(pid: int, signum: int) -> bool:
    """Send ``signum`` to the main thread of process ``pid`` (``tgkill``), not any thread."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.tgkill(pid, pid, signum) == 0:
            return True
    except (OSError, AttributeError):  # no tgkill here: any thread will do
        pass
    try:
        os.kill(pid, signum)
    except OSError:
        return False
    return True
