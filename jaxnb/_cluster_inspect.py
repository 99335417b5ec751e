"""``JaxCluster``'s read side: the group's parts (client, view, processes) and what looks at
the processes without running a cell of the user's (status, memory, stacks, who/diff, the
post-mortem) or repairs them in place (reset)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from jaxnb._core.memory_text import MemoryReport
from jaxnb._core.state import Group, ProcessInfo
from jaxnb._failures import detect

#: How long ``status`` lets the controller's queue counts catch up with a request just answered.
QUEUE_SETTLE_SECONDS = 2.0


class Inspecting:
    """The read side of :class:`jaxnb.JaxCluster` (its base class)."""

    group: Group

    # ---- access ----------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The ipyparallel ``Client`` connected to the engines."""
        self.group.require_running()
        return self.group.client

    @property
    def view(self) -> Any:
        """An ipyparallel ``DirectView`` on all engines, ordered by JAX process index."""
        self.group.require_running()
        return self.group.view

    @property
    def processes(self) -> list[ProcessInfo]:
        """One entry per JAX process (host, pid, platform, devices), in process order."""
        return self.group.processes

    @property
    def process_indices(self) -> list[int]:
        """``[0, 1, …, N-1]``."""
        return self.group.indices

    @property
    def num_processes(self) -> int:
        """How many JAX processes the cluster has."""
        return self.group.size

    @property
    def coordinator_address(self) -> str | None:
        """Address of the ``jax.distributed`` coordinator (on process 0's host)."""
        return self.group.coordinator

    @property
    def suspect(self) -> str | None:
        """Why the processes may disagree (the next cell checks them first), or ``None``."""
        return self.group.suspect

    @property
    def busy_with(self) -> str | None:
        """The name of the background training run holding the engines, or ``None``."""
        return self.group.busy_with

    def engine_for(self, process_index: int) -> int:
        """The ipyparallel engine id that carries ``process_index``."""
        return self.group.engine_for(process_index)

    def status(self) -> list[ProcessInfo]:
        """One entry per process, with its current state (idle, busy, dead) and, while the
        engines are idle, its compilation cache (``compile_cache``: folder, size, hits)."""
        from jaxnb._lifecycle import compile_cache

        processes = process_states(self.group)
        if all(info.state == "idle" for info in processes):
            compile_cache.ask(self.group)
        return processes

    def memory(self) -> MemoryReport:
        """Every process's memory per device (in use, peak, limit; on CPU the live arrays' sum
        and the process's RSS) and the largest live arrays with the variables holding them."""
        from jaxnb._cells import memory_query

        self.group.require_idle()
        return memory_query.query(self.group)

    def reset(self) -> str:
        """Repair the ``jax.distributed`` group in place (Python state kept); says what it did."""
        from jaxnb._failures import repair

        self.group.require_idle()
        return repair.reset(self.group)

    def debug(self, process: int | None = None, commands: str | Sequence[str] | None = None) -> None:
        """Post-mortem of the last failure (``%jax_debug``), on the process that failed first or
        on ``process``, at the frame that raised: pdb's commands typed at the prompt, or
        ``commands`` (``"p x; up; p y"``, or a list). With ``commands`` while no process holds a
        failure, they answer the ``jaxnb.breakpoint()`` stops of the next cell or run instead.
        """
        from jaxnb._debug import postmortem

        self.group.require_idle()
        postmortem.debug(self.group, process, commands)

    def who(self) -> list[dict[str, Any]]:
        """Every process's user variables (``%jax_who``): one dict per variable with process 0's
        ``type``, ``shape``, ``dtype``, ``sharding``, ``bytes``, and ``same`` ("yes", or which
        processes differ), told from fingerprints: no data moves between processes or here."""
        from jaxnb._debug import compare

        self.group.require_idle()
        return compare.who(self.group)

    def diff(self, name: str) -> list[dict[str, Any]]:
        """The leaves of pytree ``name`` (or an expression) that differ across processes
        (``%jax_diff``): ``path``, ``block``, ``reference`` process, ``differing`` processes,
        ``largest`` difference where the shapes agree, ``note``; ``[]`` when all agree."""
        from jaxnb._debug import compare
        from jaxnb._failures import repair

        self.group.require_idle()
        repair.ensure_ready(self.group)  # measuring a difference takes every process
        return compare.diff(self.group, name)

    def stacks(self) -> str:
        """Every process's current Python stack, mapped to cell lines (``%jax_cluster stacks``)."""
        from jaxnb._failures import stacks

        self.group.require_running()
        return stacks.collect(self.group)


def process_states(group: Group, settle: bool = True) -> list[ProcessInfo]:
    """``status`` without asking the engines (the controller's queues and the liveness check
    only). ``settle=False``: no wait for the queues to settle (an attach's client has sent no
    request yet: busy engines are busy with another kernel's work, a run going on, say)."""
    group.require_running()
    queue = group.client.queue_status()
    until = time.monotonic() + (QUEUE_SETTLE_SECONDS if settle else 0.0)
    while (not group.busy_with and time.monotonic() < until
           and any((queue.get(i.engine_id) or {}).get("queue") for i in group.processes)):
        time.sleep(0.05)  # the controller counts a request just answered a moment longer
        queue = group.client.queue_status()
    dead = detect.dead_processes(group)
    for info in group.processes:
        q = queue.get(info.engine_id)
        if info.process_index in dead or q is None:
            info.state = "dead"
        elif group.busy_with:
            info.state = f"busy ({group.busy_with})"
        else:
            info.state = "busy" if q.get("queue", 0) else "idle"
    return group.processes
