"""Where a train function's time goes on this process: compiling, waiting for data, checkpoint
saves and restores, and the rest (the steps).

The clock runs from the start of the function to its end, on the thread that runs it. JAX
announces each compilation (tracing, lowering, XLA's compile: ``jax.monitoring`` events,
start and end); jaxnb's datasets and checkpoints time themselves (:func:`counting`). Parts
nest (a batch put on devices may compile): each second is counted once, in the innermost part.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

#: The parts measured directly; ``steps`` is the rest of the function's time.
MEASURED = ("compile", "data", "checkpoint")


class RunClock:
    """One run's time on this process, split into :data:`MEASURED` parts and the steps."""

    def __init__(self) -> None:
        self.started_at = time.time()  # names the attempt: a recovered run starts a new clock
        self._start = time.perf_counter()
        self._end: float | None = None
        self.thread = threading.get_ident()
        self.seconds = dict.fromkeys(MEASURED, 0.0)
        self._open: list[list[Any]] = []  # [part, start, seconds of the parts nested in it]

    def enter(self, part: str) -> None:
        """A ``part`` begins on the run's thread."""
        self._open.append([part, time.perf_counter(), 0.0])

    def leave(self, part: str) -> None:
        """The innermost ``part`` ends: its own seconds (without nested parts) are counted."""
        if not self._open or self._open[-1][0] != part:
            return  # began before the clock started
        _, start, nested = self._open.pop()
        elapsed = time.perf_counter() - start
        self.seconds[part] += elapsed - nested
        if self._open:
            self._open[-1][2] += elapsed

    @property
    def running(self) -> bool:
        """True until :meth:`stop`."""
        return self._end is None

    def stop(self) -> None:
        """The function returned (or raised)."""
        self._end = time.perf_counter()

    def parts(self) -> dict[str, float]:
        """Seconds so far: each measured part, ``steps`` (the rest), ``in_function`` (all)."""
        now = time.perf_counter() if self._end is None else self._end
        total = now - self._start
        found = dict(self.seconds)
        for part, start, nested in self._open:  # parts still open count up to now
            found[part] += now - start - nested
        found["steps"] = max(total - sum(found[p] for p in MEASURED), 0.0)
        found["in_function"] = total
        return found


_clock: RunClock | None = None
_listening = False


def start() -> RunClock:
    """Start the clock of a run on the calling thread (listening to JAX's compile events)."""
    global _clock
    _listen()
    _clock = RunClock()
    return _clock


def stop() -> None:
    """Stop the current run's clock (its parts stay readable)."""
    if _clock is not None:
        _clock.stop()


def current() -> RunClock | None:
    """The clock of the run under way or just ended, or ``None``."""
    return _clock


@contextlib.contextmanager
def counting(part: str) -> Iterator[None]:
    """Count the time of the ``with`` body as ``part`` (on the run's thread; else nothing)."""
    clock = _clock
    if clock is None or clock.thread != threading.get_ident() or not clock.running:
        yield
        return
    clock.enter(part)
    try:
        yield
    finally:
        clock.leave(part)


def _listen() -> None:
    """Listen to JAX's compile events once per process."""
    global _listening
    if _listening:
        return
    import jax

    from jaxnb._engine import jax_internals

    events = set(jax_internals.COMPILE_EVENTS)

    def began(event: str, value: float, **kwargs: str | int) -> None:
        clock = _clock
        if event in events and clock is not None and clock.thread == threading.get_ident():
            clock.enter("compile")

    def ended(event: str, duration_secs: float, **kwargs: str | int) -> None:
        clock = _clock
        if event in events and clock is not None and clock.thread == threading.get_ident():
            clock.leave("compile")

    jax.monitoring.register_scalar_listener(began)
    jax.monitoring.register_event_duration_secs_listener(ended)
    _listening = True
