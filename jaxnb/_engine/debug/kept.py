"""The last failure of this process, kept with its frames until the next cell runs here.

A ``%%jax_cluster`` cell that raises leaves its exception in ``sys.last_value`` (IPython
sets it); IPython's ``post_execute`` event keeps it here, and ``pre_execute`` drops it when
the next cell starts. A train function's exception is kept by the run itself
(:func:`jaxnb._engine.run.reporting.execute`), and dropped when the next run is prepared.
``%jax_debug`` reads :func:`summary` on every process, then sends pdb commands to one
(:func:`command`): ordinary ipyparallel ``apply`` requests, the engine being idle.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from jaxnb._engine.debug import frames
from jaxnb._engine.debug.console import Console

NOTHING = "this process holds no failure to debug"


@dataclasses.dataclass
class _Failure:
    error: BaseException
    at: float
    console: Console | None = None

    def open(self) -> Console:
        if self.console is None:
            tb = self.error.__traceback__
            self.console = Console(frames.of_traceback(tb), tb)
        return self.console


_kept: _Failure | None = None
#: A failure was dropped because a later cell ran (so "nothing left" rather than "none").
_dropped = False
#: ``sys.last_value`` when the current cell began (a new one there means the cell raised).
_before: Any = None


def keep(error: BaseException) -> None:
    """Keep ``error`` (with its frames) as this process's failure to debug."""
    global _kept, _dropped
    _kept, _dropped = _Failure(error, time.time()), False


def drop() -> None:
    """A new cell or run starts here: the failure kept so far is not debuggable any more."""
    global _kept, _dropped
    if _kept is not None:
        _kept, _dropped = None, True


def install(shell: Any) -> None:
    """Follow ``shell``'s cells: drop the kept failure when one starts, keep its error when it ends."""
    shell.events.register("pre_execute", _cell_starts)
    shell.events.register("post_execute", _cell_ends)


def _cell_starts() -> None:
    global _before
    _before = getattr(sys, "last_value", None)
    drop()


def _cell_ends() -> None:
    error = getattr(sys, "last_value", None)
    if isinstance(error, BaseException) and error is not _before and error.__traceback__ is not None:
        keep(error)


# ---- what the notebook asks --------------------------------------------------------------


def summary() -> dict[str, Any]:
    """Whether this process failed, when, with what, where; ``dropped``: a later cell ran."""
    if _kept is None:
        return {"failed": False, "dropped": _dropped}
    console = _kept.open()
    frame, line = console.stack[console.curindex]
    error = _kept.error
    lines = str(error).strip().splitlines()
    return {
        "failed": True,
        "error": f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__,
        "interrupted": isinstance(error, KeyboardInterrupt),
        "at": _kept.at,
        "where": frames.location(frame, line),
    }


def here() -> str:
    """The failing frame and its line, as pdb shows them on entering."""
    return _open().here()


def command(line: str) -> str:
    """Run one pdb command in the kept failure's frames; its answer."""
    return _open().answer(line)


def _open() -> Console:
    if _kept is None:
        raise LookupError(NOTHING)
    return _kept.open()
