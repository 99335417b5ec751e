"""The Stop button of a live view (a run's dashboard, a search's view), and why it is inert while
a cell waits for what it stops: the kernel takes no widget click until the cell returns, so a
``wait()`` in the kernel's main thread disables it and says so (:meth:`StopControl.waiting`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The Stop button's tooltip while a cell waits for the run or search.
WAITING = ("a cell waits for it, and the kernel takes no click until that cell returns: "
           "interrupt the kernel (■) to leave it going on, then Stop ends it")


class StopControl:
    """Mixin of a view that holds ``_stop`` (an ipywidgets ``Button``), ``_on_stop`` (what a click
    calls, or None: no button) and ``status``; it names the statuses a click may stop in
    :meth:`_stoppable`."""

    _stop: Any
    _on_stop: Callable[[], None] | None
    _waited = False
    _tooltip = ""

    def _stoppable(self) -> bool:
        raise NotImplementedError

    def waiting(self, waited: bool) -> None:
        """A cell waits (``waited``) or stopped waiting for what this view shows."""
        if not self._waited:
            self._tooltip = self._stop.tooltip
        self._waited = waited
        self._stop.tooltip = WAITING if waited else self._tooltip
        self._update_stop()

    def _update_stop(self) -> None:
        """Enable the button when a click can stop something now."""
        self._stop.disabled = self._on_stop is None or self._waited or not self._stoppable()
