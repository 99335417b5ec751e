"""Optional features built on other libraries' private parts: each one is tried once, and one
that cannot work is turned off with a one-line reason (``%jax_cluster status`` lists them).

The ``*_internals.py`` adapters detect what they rely on (a signature, an attribute, a hook)
and run through :func:`optional`: an exception there never reaches the user's code nor stops
an engine from starting; it becomes the feature's :func:`problems` line and the feature is off.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from jaxnb._core.messages import first_line

_lock = threading.Lock()
_off: dict[str, str] = {}


def turn_off(feature: str, why: str) -> None:
    """Record that ``feature`` is off in this process, and why (the first reason is kept)."""
    with _lock:
        _off.setdefault(feature, " ".join(why.split())[:300])


def is_off(feature: str) -> bool:
    """Whether ``feature`` was turned off in this process."""
    with _lock:
        return feature in _off


@contextlib.contextmanager
def optional(feature: str) -> Iterator[None]:
    """Run the block that sets ``feature`` up; any exception turns the feature off instead of
    propagating (its type and first line become the reason)."""
    try:
        yield
    except Exception as exc:
        turn_off(feature, first_line(exc, 200))


def problems() -> list[str]:
    """``feature: why`` for every feature turned off in this process, one line each."""
    with _lock:
        return [f"{feature}: off ({why})" for feature, why in sorted(_off.items())]


def forget(feature: str) -> None:
    """Forget that ``feature`` was off (a test that installs it again)."""
    with _lock:
        _off.pop(feature, None)
