"""How far a run's dispatch may go ahead of the device: ``report()`` waits only on the JAX values
reported :data:`MAX_IN_FLIGHT` reports ago (they are done long before, unless the device is behind).

This is the one wait on the training thread, so it is cheap: the values' types are learnt once
(``isinstance(v, jax.Array)`` costs more than the rest of a report) and each value waits on its
own (``jax.block_until_ready`` of a list walks it as a pytree first).
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

#: Reports whose JAX values may still be computing; ``report()`` waits on the value
#: reported this many reports ago, so dispatch never runs unboundedly ahead.
MAX_IN_FLIGHT = 4
#: The same with several CPU devices per process, where overlapping steps can deadlock
#: gloo (README, "CPU collectives"): block on the previously reported value.
MAX_IN_FLIGHT_CPU_MULTI_DEVICE = 1


def max_in_flight(jax: Any) -> int:
    """The bound for this process's backend (``jax`` imported, its backend up)."""
    several_cpu = jax.default_backend() == "cpu" and jax.local_device_count() > 1
    return MAX_IN_FLIGHT_CPU_MULTI_DEVICE if several_cpu else MAX_IN_FLIGHT


class InFlight:
    """The JAX values of a run's last reports, oldest first."""

    def __init__(self) -> None:
        #: Decided at the first JAX value reported (the backend is up then); ``None`` before.
        self.limit: int | None = None
        self._reports: deque[list[Any]] = deque()
        self._arrays: set[type] = set()  # value types that are jax.Array
        self._others: set[type] = set()  # value types that are not

    def add(self, values: Any) -> None:
        """One report's ``values``; wait on those of the report :attr:`limit` reports ago."""
        arrays = []
        for value in values:
            kind = type(value)
            if kind in self._others:
                continue
            if kind in self._arrays or self._learn(kind, value):
                arrays.append(value)
        reports = self._reports
        reports.append(arrays)
        if len(reports) > (self.limit or MAX_IN_FLIGHT):
            for value in reports.popleft():
                value.block_until_ready()

    def __len__(self) -> int:
        """How many reports' values are kept (waited on when more come)."""
        return len(self._reports)

    def values(self) -> list[list[Any]]:
        """The JAX values kept, by report, oldest first."""
        return [list(r) for r in self._reports]

    def _learn(self, kind: type, value: Any) -> bool:
        """Whether values of type ``kind`` are JAX arrays (decided on ``value``, then remembered)."""
        jax = sys.modules.get("jax")
        if jax is None:  # no JAX in this process yet: nothing of it can be reported
            return False
        if isinstance(value, jax.Array) and hasattr(value, "block_until_ready"):
            if self.limit is None:
                self.limit = max_in_flight(jax)  # a JAX value exists: the backend is up
            self._arrays.add(kind)
            return True
        self._others.add(kind)
        return False
