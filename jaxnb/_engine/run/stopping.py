"""Ending a run on request: every process ends it at the same ``report()`` (or ``should_stop()``).

The notebook asks by sending ``SIGUSR2`` to the engines (through ipyparallel's
``send_signal`` on other hosts): the Stop button, ``Result.stop()``, a kernel
interrupt, a pruned trial. The handler only sets a flag.

*Stop points* are the calls of ``report()`` and ``should_stop()``, numbered 1, 2, …
on each process. Every process makes the same calls in the same order (SPMD),
so a number names the same place in the code everywhere. The processes agree on
the point where the run ends through the ``jax.distributed`` key-value store (no
XLA collective: no device sync, nothing queued behind gloo work):

- the first process that finds the flag set at a stop point announces that point
  (``at/<p>``) and wakes every process's watcher thread (``wake/<p>``);
- a watcher announces, for its process, the next stop point its main thread will
  reach (the main thread may be blocked in a collective, where Python cannot run
  a signal handler), then reads every process's announcement;
- a process whose point was announced waits at that point until every
  announcement is in; the run ends at the highest point announced. So no process
  has passed it, and each ends at most one point after the stop reached it when
  the processes go in step (one point after the furthest one otherwise).

A process whose function returns or raises announces the point after its last
one (a point it will never reach), so nobody waits for it. Without a stop
request a stop point costs a lock and a counter; a run writes two keys per
process when it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

from jaxnb._core.contract import STOP_SIGNAL
from jaxnb._engine.group import kv_store

KEY_ROOT = "jaxnb/stop/"
#: What a watcher's wake key says: a stop was asked, or the run is over (the watcher ends).
WAKE, OVER = "stop", "over"
#: A waiting main thread looks up this often (seconds), so that an interrupt gets through.
WAIT_SLICE_SECONDS = 0.1
AGREEMENT_FAILED = ("jaxnb could not agree with the other processes where the run stops: {error}; "
                    "interrupt the run, then run `%jax_cluster reset`")

_requested = False


class StopRun(BaseException):
    """Ends a train function at the stop point every process agreed on (``report()`` raises it).

    It derives from ``BaseException``, as ``KeyboardInterrupt`` and ``SystemExit`` do,
    so that an ``except Exception:`` in the function does not swallow it by accident.
    The engine's run catches it and the run ends as stopped; the function's
    ``finally`` blocks run, on every process alike.
    """


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


def clear_keys() -> None:
    """Delete the keys of earlier runs (process 0, while no run is going)."""
    kv_store.delete(KEY_ROOT)


class StopPoints:
    """One run's stop points on one process: where the run ends, once a stop is asked."""

    def __init__(self, run_id: str, process: int, num_processes: int) -> None:
        self.process, self.num_processes = process, num_processes
        self.prefix = f"{KEY_ROOT}{run_id}/"
        #: Stop points reached so far.
        self.count = 0
        #: The point every process ends at, once agreed.
        self.end: int | None = None
        self._announced: int | None = None
        self._lock = threading.Lock()
        self._agreed = threading.Event()
        self._over = threading.Event()
        self._failure: BaseException | None = None
        self.client = kv_store.client() if num_processes > 1 else None

    def start(self) -> None:
        """The function starts: watch for a stop asked by another process."""
        if self.client is not None:
            threading.Thread(target=self._watch, name="jaxnb-stop-watcher", daemon=True).start()

    def reached(self) -> bool:
        """Count one stop point; True when the run ends here (the same point on every process)."""
        with self._lock:
            self.count += 1
            point = self.count
            first = self._announced is None and _requested
            if first:
                self._announced = point
            waits = self._announced is not None
        if not waits:
            return False
        if first:
            self._ask(point)
        while not self._agreed.wait(WAIT_SLICE_SECONDS):
            pass
        if self._failure is not None:
            raise RuntimeError(AGREEMENT_FAILED.format(error=self._failure)) from self._failure
        return self.end is not None and point >= self.end

    def finish(self) -> None:
        """The function returned or raised: announce a point this process will never reach (so
        nobody waits for it) and end the watcher."""
        self._over.set()
        if self.client is None:
            return
        with self._lock:
            mine = None
            if self._announced is None:
                self._announced = mine = self.count + 1
        with contextlib.suppress(Exception):  # best effort on the way out
            if mine is not None:
                self.client.key_value_set(self._key(f"at/{self.process}"), str(mine))
            self.client.key_value_set(self._key(f"wake/{self.process}"), OVER, allow_overwrite=True)

    # ---- agreeing ------------------------------------------------------------------------

    def _ask(self, point: int) -> None:
        """This process saw the request first, at ``point``: announce it and wake every watcher."""
        if self.client is None:
            self.end = point
            self._agreed.set()
            return
        self.client.key_value_set(self._key(f"at/{self.process}"), str(point))
        for p in range(self.num_processes):
            self.client.key_value_set(self._key(f"wake/{p}"), WAKE, allow_overwrite=True)

    def _watch(self) -> None:
        """(thread) Once woken: announce this process's next point, then take the highest of all."""
        assert self.client is not None
        try:
            if kv_store.wait_for(self.client, self._key(f"wake/{self.process}"), self._over) != WAKE:
                return
            with self._lock:
                mine = None
                if self._announced is None:
                    self._announced = mine = self.count + 1
            if mine is not None:
                self.client.key_value_set(self._key(f"at/{self.process}"), str(mine))
            points = [kv_store.wait_for(self.client, self._key(f"at/{p}"), self._over)
                      for p in range(self.num_processes)]
            if None not in points:
                self.end = max(int(p) for p in points if p is not None)
        except Exception as exc:  # the main thread raises it at its next stop point
            self._failure = exc
        finally:
            self._agreed.set()

    def _key(self, name: str) -> str:
        return f"{self.prefix}{name}"
