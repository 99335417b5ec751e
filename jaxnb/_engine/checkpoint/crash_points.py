"""Test hook: a process SIGKILLs itself at a named point of a checkpoint's save sequence.

``JAXNB_CRASH_AT=POINT:STEP:PROCESS`` in an engine's environment makes JAX process PROCESS
kill itself when the save of step STEP reaches POINT, as a host that crashes there would
stop (PROCESS ``*``: every process, as a whole Slurm step cancelled). Unset (always, outside
tests), :func:`reached` only reads the environment. The points, in order:

- ``saving``: the step's data positions are noted; nothing of the step is written yet;
- ``writing``: every process wrote its part of the step (Orbax's temporary folder); process 0
  is about to commit it (only process 0 gets here);
- ``committed``: the step is committed; its report has not left the process;
- ``reported``: the report is queued for the notebook.
"""

from __future__ import annotations

import os
import signal

ENV = "JAXNB_CRASH_AT"
POINTS = ("saving", "writing", "committed", "reported")


def reached(point: str, step: int) -> None:
    """Kill this process (SIGKILL) if ``JAXNB_CRASH_AT`` names this point, step and process."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    from jaxnb._engine.group.context import process_index

    where, at, process = spec.split(":")
    if where == point and int(at) == step and process in ("*", str(process_index())):
        os.kill(os.getpid(), signal.SIGKILL)
