"""A run asked to stop hands the engines over: the next run waits briefly instead of refusing."""

from __future__ import annotations

import time
from typing import Any

from jaxnb._core.state import Group

#: How long a new run waits for a run that was asked to stop to let go of the engines.
STOP_WAIT_SECONDS = 15.0
_POLL_SECONDS = 0.05


def track(group: Group, monitor: Any) -> None:
    """Remember ``monitor`` (it has ``stop_requested``) as ``group``'s current run."""
    group.current_run = monitor


def wait_if_stopping(group: Group, seconds: float = STOP_WAIT_SECONDS) -> None:
    """If ``group``'s run was asked to stop, wait (at most ``seconds``) until it has ended.

    Ended means the engines are free and its Result is concluded (the dashboard's
    final plot drawn), so the stopped run reads finished once the next one starts.
    Returns at once when no run is under way or it was not asked to stop; the
    caller still refuses when ``group.busy_with`` is set afterwards.
    """
    monitor = group.current_run
    if monitor is None or not getattr(monitor, "stop_requested", False):
        return
    deadline = time.monotonic() + seconds
    result = getattr(monitor, "result", None)
    while ((group.busy_with or getattr(result, "running", False))
           and time.monotonic() < deadline):
        time.sleep(_POLL_SECONDS)
