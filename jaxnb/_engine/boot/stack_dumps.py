"""The main thread's Python stack on demand, even while the engine is blocked in C.

``faulthandler`` dumps from its C signal handler, so it works while the main
thread waits inside an XLA collective (where no Python code can run).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import tempfile
from typing import IO

from jaxnb._core.contract import ENV_STACKS_DIR, STACK_SIGNAL, stack_file

_stack_file: IO[str] | None = None
_crash_file: IO[str] | None = None


def stack_path(pid: int | None = None) -> str:
    """The file where engine ``pid`` writes its stacks when signalled."""
    return stack_file(os.environ.get(ENV_STACKS_DIR) or tempfile.gettempdir(), pid or os.getpid())


def arm() -> None:
    """Dump the stack of the thread that gets ``SIGUSR1`` to :func:`stack_path`."""
    global _stack_file
    # On another host the folder may not exist yet (made here, not in stack_path(): a
    # process on its way out must not make again what the notebook's clean-up removed).
    os.makedirs(os.path.dirname(stack_path()), mode=0o700, exist_ok=True)
    # Append mode: the notebook truncates the file before each dump request.
    _stack_file = open(stack_path(), "w+")  # noqa: SIM115 - lives as long as the process
    _stack_file.close()
    _stack_file = open(stack_path(), "a")  # noqa: SIM115
    os.chmod(_stack_file.name, 0o600)
    # Only the thread that takes the signal (jaxnb sends it to the main thread): walking
    # other threads' frames while they run can crash the process.
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=False, chain=False)
    # A crash (SIGSEGV, SIGABRT, ...) leaves every thread's stack in the engine's log,
    # where jaxnb shows it as the dead process's last lines. The log is the stderr this
    # process starts with; ipykernel later points fd 2 at a pipe, so keep a copy of it.
    global _crash_file
    if sys.__stderr__ is None:  # started without a stderr: nowhere to write a crash
        return
    _crash_file = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")
    faulthandler.enable(file=_crash_file, all_threads=True)


def remove() -> None:
    """Delete this process's stack file (at exit)."""
    with contextlib.suppress(OSError):
        os.unlink(stack_path())
