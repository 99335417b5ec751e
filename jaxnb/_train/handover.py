"""A run asked to stop hands the engines over: the next run waits briefly instead of refusing."""

from __future__ import annotations

import time
import weakref
from typing import Any

#: How long a new run waits for a run that was asked to stop to let go of the engines.
STOP_WAIT_SECONDS = 15.0
_POLL_SECONDS = 0.05

#: id(cluster or group) -> weak reference to its current run's monitor (works for slotted groups).
_following: dict[int, weakref.ref[Any]] = {}


def track(cluster: Any, monitor: Any) -> None:
    """Remember ``monitor`` (it has ``stop_requested``) as ``cluster``'s current run."""
    _following[id(cluster)] = weakref.ref(monitor)


def wait_if_stopping(cluster: Any, seconds: float = STOP_WAIT_SECONDS) -> None:
    """If ``cluster``'s run was asked to stop, wait (at most ``seconds``) until it has ended.

    Returns at once when no run is under way or it was not asked to stop; the
    caller still refuses when ``cluster.busy_with`` is set afterwards.
    """
    ref = _following.get(id(cluster))
    monitor = ref() if ref is not None else None
    if monitor is None or not getattr(monitor, "stop_requested", False):
        return
    deadline = time.monotonic() + seconds
    while cluster.busy_with and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
