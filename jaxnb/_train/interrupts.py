"""Count kernel interrupts during a blocking run instead of raising at a random line.

First Ctrl-C / "Interrupt kernel": the run is asked to stop (every process ends it at
the same report).
Second: every process is interrupted (SIGINT). Third: the notebook stops
waiting and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

RAISE_AT = 3


class InterruptCounter:
    """While entered (main thread only), SIGINT increments :attr:`count`."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptCounter:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count >= RAISE_AT:
            self._restore()
            raise KeyboardInterrupt

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
