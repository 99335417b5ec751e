"""The words jaxnb uses with its users: process labels and the hints that end a message.

Every message names processes by JAX index (``[p0]``) and ends in what to do;
the hints below are the only places those instructions are written, and
``tests/test_messages.py`` checks that every magic, flag and method a message
names really exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

RESTART = "run `%jax_cluster restart`"
RESET = "run `%jax_cluster reset`"
START = "start one with `%jax_cluster start` (or `jaxnb.JaxCluster().start()`)"
NOT_STARTED = f"no jaxnb cluster is running; {START}"
ALREADY_RUNNING = (
    "a jaxnb cluster is already running; use `%jax_cluster restart` to start it again "
    "or `%jax_cluster stop` first"
)
GROUP_BROKEN = f"the jax.distributed group is broken: {RESTART}"
BUSY = (
    "the engines are busy with the background training run {name!r}; wait for it to end "
    "(its Result's `.wait()`) or press Stop on its dashboard (or call `.stop()`) first"
)
NO_INIT = "start the cluster with `%jax_cluster start --no-init` to initialise it yourself"


def label(process: int) -> str:
    """The label of a JAX process in messages and merged output: ``[p1]``."""
    return f"[p{process}]"


def labels(processes: Iterable[int]) -> str:
    """``[p0], [p2]``: the labels of several processes, in order."""
    return ", ".join(label(p) for p in sorted(processes))


def first_line(error: Any, width: int = 200) -> str:
    """``Name: first line of the message`` of a local exception or an ipyparallel RemoteError."""
    name = getattr(error, "ename", None) or type(error).__name__
    lines = str(getattr(error, "evalue", error)).strip().splitlines()
    text = f"{name}: {lines[0]}" if lines else name
    return text if len(text) <= width else text[: width - 3] + "..."


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 process``, ``2 processes``, ``1 global device``, ``2 global devices``."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def size_text(size: float) -> str:
    """``12.3 MB`` (decimal units; bytes as a whole number)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"


def article(word: str) -> str:
    """``an int``, ``a str``: ``word`` with its indefinite article."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
