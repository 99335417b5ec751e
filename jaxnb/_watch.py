"""Watch a running cell: timeouts, dead processes, divergence, interrupts.

Turns each into a :class:`~jaxnb._errors.ProcessFailure` within seconds,
naming the processes and where the still-running ones wait.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

from jaxnb._errors import ProcessFailure
from jaxnb._outputs import label

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

#: After the first process finishes, how long the others may still run before
#: jaxnb calls it a divergence (they are probably waiting in a collective).
DIVERGENCE_GRACE_SECONDS = 5.0
#: How often engine liveness is checked while a cell runs.
LIVENESS_PERIOD_SECONDS = 0.5


class CellWatch:
    """Checks one running cell; :meth:`check` raises when it must not be waited on."""

    def __init__(self, cluster: JaxCluster, code: str, timeout: float | None):
        self.cluster = cluster
        self.code = code
        self.timeout = timeout
        self.started = time.monotonic()
        self.first_done: float | None = None
        self._next_liveness = self.started + LIVENESS_PERIOD_SECONDS

    def check(self, done: set[int], by_process: dict[int, dict]) -> None:
        """Raise :class:`ProcessFailure` on a timeout, a dead process or divergence."""
        now = time.monotonic()
        if now >= self._next_liveness:
            self._next_liveness = now + LIVENESS_PERIOD_SECONDS
            from jaxnb import _health

            dead = _health.dead_processes(self.cluster)
            if dead:
                self.cluster.suspect = "a process died"
                raise ProcessFailure(_health.describe_dead(self.cluster, dead), sorted(dead), [])
        running = [p for p in by_process if p not in done]
        if done and running:
            self.first_done = self.first_done or now
            if now - self.first_done > DIVERGENCE_GRACE_SECONDS:
                self._fail_diverged(done, running, by_process)
        if self.timeout is not None and now - self.started > self.timeout:
            self._fail(
                f"the cell ran past its timeout of {self.timeout:g} s", running or list(by_process)
            )

    def _fail_diverged(self, done: set[int], running: list[int], by_process: dict) -> None:
        finished = []
        for p in sorted(done):
            error = by_process[p].get("error")
            how = f"raised {error.ename}: {error.evalue}" if error is not None else "finished"
            finished.append(f"{label(p)} {how}")
        self._fail(
            "processes diverged: " + "; ".join(finished) + f"; still running: "
            + ", ".join(label(p) for p in running),
            running,
        )

    def _fail(self, what: str, running: list[int]) -> None:
        from jaxnb import _stacks

        stacks = _stacks.collect(self.cluster, running, cell_code=self.code)
        self.cluster.suspect = what
        raise ProcessFailure(
            f"{what}. Where each running process waits is shown above; "
            "run `%jax_cluster reset` to repair the group (or `%jax_cluster restart`)",
            running,
            [stacks],
        )

    def interrupted(self, by_process: dict[int, Any]) -> None:
        """Forward a kernel interrupt to every engine and note the cluster may be out of step."""
        self.cluster.suspect = "a cell was interrupted"
        try:
            self.cluster.client.send_signal(signal.SIGINT, targets=self.cluster.view.targets, block=True)
        except Exception:  # noqa: BLE001 - the interrupt must reach the user regardless
            pass
        print(
            "jaxnb: interrupted every process (SIGINT). Work already dispatched to XLA is not "
            "cancelled; jaxnb checks the group before the next cell.",
        )
