"""``--all``: every process's output in full, each under its label (the merged form is
:mod:`jaxnb._cells.live`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxnb._cells.live_noise import is_log_only
from jaxnb._core.messages import label


def write_raw(processes: Sequence[int], texts: dict[int, str], write: Callable[[str], object]) -> None:
    """``--all``: every process's output in full, each under its label; the C++ libraries'
    informational lines are left in the engine's log, as in the merged form."""
    for p in processes:
        text = "".join(line for line in (texts.get(p) or "").splitlines(keepends=True)
                       if not is_log_only(line.rstrip("\r\n")))
        if text:
            write(f"{label(p)}\n{text}")
            if not text.endswith("\n"):
                write("\n")
