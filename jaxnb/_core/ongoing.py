"""What a run and a search share while they go on: ``running``, ``wait()``, ``stop()``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Ongoing:
    """Mixin for a result that may still be going on (a ``--background`` run or search).

    The class using it holds ``_done`` (a ``threading.Event``) and ``_stop`` (what
    :meth:`stop` calls, or ``None``), and names itself in :meth:`_waited_for`.
    """

    _done: threading.Event
    _stop: Callable[[], None] | None
    _view: Any = None

    @property
    def running(self) -> bool:
        """True until it has ended (always False for a blocking run's result)."""
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Wait until it ends (at most ``timeout`` seconds); returns ``self``."""
        # In the kernel's main thread, its live view's Stop button cannot be clicked meanwhile.
        waiting = threading.current_thread() is threading.main_thread()
        held = getattr(self._view, "waiting", None) if waiting else None
        if held is not None:
            held(True)
        try:
            if not self._done.wait(timeout):
                raise TimeoutError(f"{self._waited_for()} is still running after {timeout:g} s")
        finally:
            if held is not None:
                held(False)
        return self

    def stop(self) -> None:
        """Ask it to stop (a run: every process at the same step; a search: after this trial)."""
        if self.running and self._stop is not None:
            self._stop()

    def set_stopper(self, stop: Callable[[], None]) -> None:
        """(jaxnb) What :meth:`stop` calls while it goes on."""
        self._stop = stop

    def set_view(self, view: Any) -> None:
        """(jaxnb) Its live view, whose Stop button :meth:`wait` marks inert while it waits."""
        self._view = view

    def set_done(self) -> None:
        """(jaxnb) It has ended: :meth:`wait` returns and ``running`` turns False."""
        self._done.set()

    def _waited_for(self) -> str:
        return "it"
