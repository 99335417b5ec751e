"""``--all``: every process's output in full, each under its label (the merged form is
:mod:`jaxnb._cells.live`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxnb._core.messages import label


def write_raw(processes: Sequence[int], texts: dict[int, str], write: Callable[[str], object]) -> None:
    """``--all``: every process's output in full, each under its label."""
    for p in processes:
        if texts.get(p):
            write(f"{label(p)}\n{texts[p]}")
            if not texts[p].endswith("\n"):
                write("\n")
