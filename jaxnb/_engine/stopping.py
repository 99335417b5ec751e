"""``should_stop()``: every process says True at the same call, once the user asked to stop.

The notebook asks by sending ``SIGUSR2`` to every engine (through ipyparallel's
``send_signal``, so it also works on other hosts); the handler only sets a flag.
The processes then agree through the ``jax.distributed`` key-value store, not
an XLA collective (so no device sync and nothing queued behind gloo work):
at agreed call numbers, process 0 writes its flag and the number of the next
check; the others read it. Process 0 spaces the checks about
:data:`CHECK_SECONDS` apart, so agreeing costs well under 1% of a step.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any

from jaxnb._core.contract import STOP_SIGNAL

#: Aim for one agreement about this often (seconds of process 0's time).
CHECK_SECONDS = 0.1
#: Never more than this many calls between two agreements.
MAX_CALLS_BETWEEN_CHECKS = 10_000
#: Key-value waits are cut in slices this long so that an interrupt gets through.
WAIT_SLICE_MS = 1000
KEY_ROOT = "jaxnb/stop/"

_requested = False


def _on_signal(signum: int, frame: Any) -> None:
    global _requested
    _requested = True


def arm() -> None:
    """Install the ``SIGUSR2`` handler (main thread) and clear any old request.

    The handler stays installed after the run, so a late signal never hits
    the default action (which would end the engine).
    """
    global _requested
    _requested = False
    signal.signal(STOP_SIGNAL, _on_signal)


def requested() -> bool:
    """True once this process was asked to stop."""
    return _requested


def kv_client() -> Any | None:
    """The ``jax.distributed`` coordination client, or None without one."""
    from jaxnb._engine.jax_internals import distributed_client

    return distributed_client()


def clear_keys() -> None:
    """Delete the keys of earlier runs (process 0, while no run is going)."""
    client = kv_client()
    if client is not None:
        with contextlib.suppress(Exception):  # nothing to delete
            client.key_value_delete(KEY_ROOT)


class StopAgreement:
    """The state behind ``should_stop()`` for one run on one process."""

    def __init__(self, run_id: str, process: int, num_processes: int) -> None:
        self.process = process
        self.client: Any = kv_client() if num_processes > 1 else None
        self.prefix = f"{KEY_ROOT}{run_id}/"
        self.calls = 0
        self.next_check = 0
        self.stopped = False
        self._last_check: tuple[int, float] | None = None

    def __call__(self) -> bool:
        if self.stopped:
            return True
        call, self.calls = self.calls, self.calls + 1
        if self.client is None:
            self.stopped = requested()
            return self.stopped
        if call != self.next_check:
            return False
        if self.process == 0:
            stop, self.next_check = requested(), call + self._spacing(call)
            self.client.key_value_set(self._key(call), f"{int(stop)} {self.next_check}")
        else:
            stop, self.next_check = self._read(call)
        self.stopped = stop
        return stop

    def abort(self) -> None:
        """Process 0 failed: tell the processes waiting at the next check to stop."""
        if self.client is not None and self.process == 0 and not self.stopped:
            with contextlib.suppress(Exception):  # best effort on the way out
                self.client.key_value_set(self._key(self.next_check), "1 -1")

    def _key(self, call: int) -> str:
        return f"{self.prefix}{call}"

    def _spacing(self, call: int) -> int:
        now = time.monotonic()
        last, self._last_check = self._last_check, (call, now)
        if last is None or call == last[0]:
            return 1
        per_call = (now - last[1]) / (call - last[0])
        if per_call <= 0:
            return MAX_CALLS_BETWEEN_CHECKS
        return max(1, min(MAX_CALLS_BETWEEN_CHECKS, int(CHECK_SECONDS / per_call)))

    def _read(self, call: int) -> tuple[bool, int]:
        key = self._key(call)
        while True:
            try:
                value = self.client.blocking_key_value_get(key, WAIT_SLICE_MS)
                break
            except Exception as exc:  # only a timeout slice is retried
                if "DEADLINE_EXCEEDED" not in str(exc):
                    raise
        stop, following = value.split()
        return stop == "1", int(following)
