"""The live view of a running cell in the notebook: one display, updated in place, emptied at the end.

The panel appears once the live view has had something to show for ``grace``
seconds (so a short cell, whose output lines up at once, leaves only ordinary
stream output), is updated at most every ``interval`` seconds, and is emptied
when the cell ends, just before the tidy output is written as stream output.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from jaxnb._core.temp_folders import TempFolders

#: Seconds the view must have content before the panel appears.
GRACE_SECONDS = 0.25
#: Seconds between two updates of the panel, at least.
INTERVAL_SECONDS = 0.05


class Screen(Protocol):
    """Where the panel is drawn: show once, then update in place."""

    def show(self, text: str) -> None: ...

    def update(self, text: str) -> None: ...


class NotebookScreen:
    """A ``text/plain`` display with a display id, in the running kernel's cell output."""

    def __init__(self) -> None:
        self._handle = None

    def show(self, text: str) -> None:
        from IPython.display import display

        self._handle = display({"text/plain": text}, raw=True, display_id=True)

    def update(self, text: str) -> None:
        # Emptied, the display has no data at all: nothing to render, nothing for nbval to compare.
        if self._handle is not None:
            self._handle.update({"text/plain": text} if text else {}, raw=True)


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel whose displays go to the notebook."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    from IPython.core.displaypub import CapturingDisplayPublisher

    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    # Under ``capture_output`` only the tidy text is wanted, not every state of a live view.
    return not isinstance(shell.display_pub, CapturingDisplayPublisher)


class LivePanel:
    """Draws the concatenated views of some streams while a cell runs."""

    def __init__(
        self,
        views: Sequence[Callable[[], str]],
        screen: Screen,
        *,
        grace: float = GRACE_SECONDS,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.views = list(views)
        self.screen = screen
        self.grace = grace
        self.interval = interval
        self.clock = clock
        self.shown = False
        self._since: float | None = None  # when the view last became non-empty
        self._drawn = ""
        self._drawn_at = 0.0

    def tick(self) -> None:
        """Look at the views; show or update the panel if it is time."""
        text = "".join(view() for view in self.views)
        now = self.clock()
        if not text:
            self._since = None
        elif self._since is None:
            self._since = now
        if not self.shown:
            if text and self._since is not None and now - self._since >= self.grace:
                self.screen.show(text)
                self.shown, self._drawn, self._drawn_at = True, text, now
            return
        if text != self._drawn and now - self._drawn_at >= self.interval:
            self.screen.update(text)
            self._drawn, self._drawn_at = text, now

    def close(self) -> None:
        """Empty the panel (the tidy output follows as stream output)."""
        if self.shown and self._drawn:
            self.screen.update("")
            self._drawn = ""


def save_outputs(stream: str, folders: TempFolders) -> Callable[[dict[int, str]], str]:
    """A ``save_log`` for :class:`jaxnb._cells.live.LiveMerger`: each process's text to a file.

    The files go to a new folder under the temporary directory, one of the cluster's
    ``folders`` (removed when that cluster stops); the folder's name is what the page's
    note shows.
    """

    def save(texts: dict[int, str]) -> str:
        folder = pathlib.Path(folders.make("jaxnb-output-"))
        for p, text in texts.items():
            (folder / f"p{p}.{stream}.txt").write_text(text)
        return f"{folder}{os.sep}p*.{stream}.txt"

    return save


def live_options(stream: str, folders: TempFolders) -> dict:
    """The ``save_log`` and ``flush`` of the :class:`jaxnb._cells.live.LiveMerger` of
    ``sys.<stream>``; full outputs are saved in one of the cluster's ``folders``."""
    return {"save_log": save_outputs(stream, folders), "flush": getattr(sys, stream).flush}
