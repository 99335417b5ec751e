"""Make engines exit when the notebook kernel that launched them is gone.

Runs on its own thread, so it fires even while the engine's main thread is
busy computing or blocked in a collective. When the kernel disappears (even
after SIGKILL) it also stops the controller and removes the key files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

POLL_SECONDS = 1.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned(parent_pid: int, original_ppid: int) -> bool:
    return not _alive(parent_pid) or os.getppid() != original_ppid


def _clean_up_and_exit(controller_pid: int | None, files: list[str]) -> None:
    if controller_pid:
        with contextlib.suppress(OSError):
            os.kill(controller_pid, signal.SIGKILL)
    for path in files:
        with contextlib.suppress(OSError):
            os.unlink(path)
    from jaxnb._engine import stacks

    stacks.remove()
    os._exit(70)


def _watch(parent_pid: int, original_ppid: int, controller_pid: int | None, files: list[str]):
    while not _orphaned(parent_pid, original_ppid):
        time.sleep(POLL_SECONDS)
    _clean_up_and_exit(controller_pid, files)


def start_from_env() -> None:
    """Start the watchdog when ``JAXNB_PARENT_PID`` names the launching kernel."""
    parent = os.environ.get("JAXNB_PARENT_PID")
    if not parent:
        return
    controller = os.environ.get("JAXNB_CONTROLLER_PID")
    files = [f for f in os.environ.get("JAXNB_CLEANUP_FILES", "").split(os.pathsep) if f]
    args = (int(parent), os.getppid(), int(controller) if controller else None, files)
    threading.Thread(target=_watch, args=args, name="jaxnb-watchdog", daemon=True).start()
