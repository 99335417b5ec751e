"""The phases of a recovery (``Result.failures[i].phases``), named once, and their stopwatch."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

#: From the dead process's last report (or the attempt's start) to its death seen: an upper
#: bound on how long the death went unnoticed (when it died between two reports is not known).
DETECT = "detect"
#: With ``--min-processes``: the hosts found unreachable get a short grace to answer again
#: before they are left out (:mod:`jaxnb._train.resize`).
GRACE = "wait for lost hosts"
STOP = "stop the old group"
START = "start or swap"
JOIN = "join jax.distributed"
REPLAY = "replay"
#: ``get_checkpoint().restore()`` in the resumed function (0 for a directory it reads itself).
RESTORE = "restore"
#: From the replay's end to the resumed function's first report, its restore taken out:
#: setting the run up, compiling (or reading the compilation cache) and the step itself.
FIRST_STEP = "first step"
ORDER = (DETECT, GRACE, STOP, START, JOIN, REPLAY, RESTORE, FIRST_STEP)


class Stopwatch(dict[str, float]):
    """Seconds by phase; :meth:`timed` adds the time a block took to a phase."""

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self[phase] = self.get(phase, 0.0) + time.monotonic() - start


def add(into: dict[str, float], more: dict[str, float]) -> None:
    """Add the seconds of ``more`` to ``into``, phase by phase."""
    for phase, seconds in more.items():
        into[phase] = into.get(phase, 0.0) + seconds


def in_order(phases: dict[str, float]) -> dict[str, float]:
    """``phases`` in the order they happen (unknown names last), rounded to milliseconds."""
    known = [p for p in ORDER if p in phases] + [p for p in phases if p not in ORDER]
    return {p: round(phases[p], 3) for p in known}


def largest(phases: dict[str, float]) -> tuple[str, float] | None:
    """The phase that took longest, and its seconds (``None`` when there is none), named
    without the reason a phase may carry after a colon (``no spare ready: …``)."""
    if not phases:
        return None
    name, seconds = max(phases.items(), key=lambda kv: kv[1])
    return name.split(":", 1)[0], seconds
