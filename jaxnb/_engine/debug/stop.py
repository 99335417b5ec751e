"""``jaxnb.breakpoint()``: every process that reaches it stops there until the notebook says so.

The process publishes where it stopped on ipyparallel's data channel (the notebook follows
it for the running cell or training run: :mod:`jaxnb._debug.stops`) and waits, in short
slices so that an interrupt gets through. Its main thread is busy with the cell, so the
notebook's commands come on the engine's control channel (:mod:`.hooks`), as ipyparallel
``apply`` requests that run :func:`command` (pdb on the stopped frame) and, at ``c``,
:func:`resume`.
"""

from __future__ import annotations

import bdb
import dataclasses
import itertools
import sys
import threading
import time
import types
from typing import Any

from jaxnb._core.contract import BREAKPOINT_KEY
from jaxnb._engine.debug import frames

#: The waiting process looks for an interrupt this often (seconds).
WAIT_SLICE_SECONDS = 0.1
NOT_ON_AN_ENGINE = ("jaxnb.breakpoint(): not on a jaxnb engine, nothing to stop (Python's own "
                    "breakpoint() debugs this process)")
NOT_STOPPED = "*** this process is not stopped at that jaxnb.breakpoint() any more\n"
QUIT = "q in jaxnb's debugger ended the cell"
NO_CONTROL = ("jaxnb.breakpoint(): not stopping: this engine's ipykernel cannot take the "
              "debugger's commands while a cell runs ({why}); the cell goes on")


@dataclasses.dataclass
class _Stop:
    console: Any  # a jaxnb._engine.debug.console.Console (imported when a process stops)
    go: threading.Event = dataclasses.field(default_factory=threading.Event)
    quit: bool = False


_stops: dict[int, _Stop] = {}
_numbers = itertools.count(1)
_refused = False


def stop_here(frame: types.FrameType) -> None:
    """``jaxnb.breakpoint()`` called in ``frame``: stop until the notebook continues (``c``)."""
    from jaxnb._engine.run.publisher import datapub_sender

    try:
        send = datapub_sender()
    except (ImportError, RuntimeError):
        print(NOT_ON_AN_ENGINE, file=sys.stderr)
        return
    from jaxnb._engine.debug import hooks
    from jaxnb._engine.debug.console import Console

    hooks.install()
    if not hooks.control_ready:  # nothing could reach the stopped process: do not stop
        from jaxnb._core.ipykernel_internals import CONTROL_APPLY
        from jaxnb._core.optional import problems

        global _refused
        if not _refused:  # once: a breakpoint in a loop says it once
            _refused = True
            why = next((ln for ln in problems() if ln.startswith(CONTROL_APPLY)), "not installed")
            print(NO_CONTROL.format(why=why), file=sys.stderr)
        return
    console = Console(frames.of_frame(frame))
    frame, line = console.stack[-1]
    number = next(_numbers)
    stop = _stops[number] = _Stop(console)
    try:
        send({BREAKPOINT_KEY: {"id": number, "where": frames.location(frame, line),
                               "source": frames.source(frame, line), "time": time.time()}})
        while not stop.go.wait(WAIT_SLICE_SECONDS):
            pass
    finally:
        _stops.pop(number, None)
    if stop.quit:
        raise bdb.BdbQuit(QUIT)


def command(number: int, line: str) -> str:
    """Run one pdb command at stop ``number`` (on the control thread); its answer."""
    stop = _stops.get(number)
    return NOT_STOPPED if stop is None else stop.console.answer(line)


def resume(number: int, quit: bool = False) -> bool:
    """Let stop ``number`` go on (``quit``: raise ``BdbQuit`` there); False if it is gone."""
    stop = _stops.get(number)
    if stop is None:
        return False
    stop.quit = quit
    stop.go.set()
    return True
