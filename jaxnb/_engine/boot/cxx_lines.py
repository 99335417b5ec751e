"""Which lines an engine's C and C++ libraries write to fd 2 reach the cell (engine side).

Every byte written to fd 2 is in the engine's log already (:mod:`.stderr_tee`), the log that
``%jax_cluster status`` points to. Of what then goes on to the cell:

- informational lines stay in the log only: gloo's (``[Gloo] Rank 2 is connected to 3 peer
  ranks...``, after every join and recovery) and XLA's, absl's and glog's ``I`` lines;
- XLA's allocator lines (``bfc_allocator``, any level) are held back: an out-of-memory error's
  explanation takes them (:func:`take_allocator_lines`) and shows them folded under itself;
  those no explanation takes within :data:`HOLD_SECONDS` go on to the cell as they were;
- everything else (warnings, errors, any other text) goes on to the cell at once, where the
  notebook names the process.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from jaxnb._core.cxx_log import ALLOCATOR, CELL, MAY_BE, route

#: Allocator lines not taken by an explanation in this long go on to the cell (seconds).
HOLD_SECONDS = 5.0
#: How many held allocator lines are kept (the latest).
HELD_LINES = 200

_held: deque[tuple[float, str]] = deque(maxlen=HELD_LINES)
_lock = threading.Lock()


def take_allocator_lines() -> list[str]:
    """The allocator lines held back (once): an out-of-memory explanation shows them."""
    with _lock:
        lines = [line for _, line in _held]
        _held.clear()
    return lines


class Router:
    """Splits what reaches fd 2 into lines and says what goes on to the cell now."""

    def __init__(self) -> None:
        self.partial = ""

    def feed(self, text: str, now: float | None = None) -> str:
        """The text of ``text`` (and of lines held before) that goes on to the cell now."""
        now = time.monotonic() if now is None else now
        *lines, self.partial = (self.partial + text).split("\n")
        out = self.expired(now)
        for line in lines:
            where = route(line)
            if where == CELL:
                out.append(line + "\n")
            elif where == ALLOCATOR:
                with _lock:
                    _held.append((now, line))
        if self.partial and not MAY_BE.match(self.partial):  # not a log line: no need to wait
            out.append(self.partial)
            self.partial = ""
        return "".join(out)

    def expired(self, now: float) -> list[str]:
        """Held allocator lines no explanation took in time, to go on to the cell."""
        out = []
        with _lock:
            while _held and _held[0][0] <= now - HOLD_SECONDS:
                out.append(_held.popleft()[1] + "\n")
        return out
