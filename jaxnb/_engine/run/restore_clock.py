"""Seconds a train function spent in ``Checkpoint.restore`` since it started: a recovery's
restore phase, sent with the function's first report (``jaxnb._core.phases.RESTORE``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

seconds = 0.0


def reset() -> None:
    """A train function starts: nothing restored yet."""
    global seconds
    seconds = 0.0


@contextlib.contextmanager
def timed() -> Iterator[None]:
    """Count the block's time as restoring."""
    global seconds
    start = time.monotonic()
    try:
        yield
    finally:
        seconds += time.monotonic() - start
