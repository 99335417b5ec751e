"""The spare pool's refill: new spares start as soon as the group that took them has settled.

A swap (a restart, a recovery) takes the spares; new ones start once the new group's first
step is reported (:meth:`Refill.settle`, from the run's monitor) — importing JAX would slow
that step's compilation and restore — or :data:`SETTLE_SECONDS` after the swap when no run
reports. A second failure 10 s after the first then finds spares registered. A restart that
finds them still starting waits for them (never slower than starting new engines, which is
what they are doing already), and ``Result.failures[i].phases`` says why no spare was ready
(:func:`why_none`).
"""

from __future__ import annotations

import threading
import time

from jaxnb._core.state import Group

#: Without a run's first step to wait for, new spares start this long after a swap.
SETTLE_SECONDS = 5.0
#: A phase whose name says that no spare was ready, and why (its seconds: those spent waiting
#: for spares that were still starting; 0 when new engines were started instead).
NO_SPARE = "no spare ready"


class Refill:
    """When the group's spares were last taken; when their replacements were launched."""

    def __init__(self) -> None:
        self.taken_at: float | None = None
        self.launched_at: float | None = None
        self._settled = threading.Event()

    def taken(self) -> None:
        """A swap took the spares: the next refill waits for the new group to settle."""
        self.taken_at = time.monotonic()
        self._settled.clear()

    def settle(self) -> None:
        """The group reported its first step: spares may start now."""
        self._settled.set()

    def wait_settled(self, seconds: float) -> None:
        self._settled.wait(seconds)

    def launched(self) -> None:
        self.launched_at = time.monotonic()

    def why_none(self, ready: int, starting: int, died: int, needed: int, keeps: int) -> str:
        """Why fewer than ``needed`` spares were ready: ``ready`` registered, ``starting`` launched
        and not registered yet, ``died`` exited before use; the cluster keeps ``keeps``."""
        now = time.monotonic()
        if keeps == 0:
            return "this cluster keeps no spares (--spares 0, or a batch launcher's nodes)"
        if self.taken_at is not None and (self.launched_at is None or self.launched_at < self.taken_at):
            return (f"the restart {now - self.taken_at:.1f} s before took them and their "
                    "replacements had not started yet")
        if starting:
            since = f", launched {now - self.launched_at:.1f} s before," if self.launched_at else ""
            return f"{starting} spare(s){since} still starting, {ready} of {needed} registered"
        if died:
            return f"{died} spare(s) exited before use, {ready} of {needed} registered"
        return f"{ready} of {needed} spares registered on the processes' hosts"


def of(group: Group) -> Refill:
    """``group``'s refill record (made on first use)."""
    if group.refill is None:
        group.refill = Refill()
    return group.refill
