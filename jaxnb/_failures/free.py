"""Free processes that are still running after a failure, a timeout or an interrupt.

Signals go where the engines run (:mod:`jaxnb._hosts.site`): to local engines by pid (they
run without ipyparallel's nanny process, which saves a Python process per
engine at start), to remote engines through ipyparallel's ``send_signal``,
which their nanny carries out.

First SIGINT (a ``KeyboardInterrupt`` at the next Python line). A process
blocked inside a gloo collective does not get back to Python until XLA's
collective timeout, so jaxnb then closes the TCP connections of the group's
gloo contexts (with ``pidfd_getfd``, on the engines' hosts):
the blocked collective fails at once, and every later collective on the old
group fails loudly instead of pairing with a stale one. The group must then be
re-initialised (:func:`jaxnb._failures.repair.reset`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time

from jaxnb._core.state import Group
from jaxnb._hosts import cut_outcome, site

#: How long processes get to stop after SIGINT before their collectives are cut.
INTERRUPT_WAIT_SECONDS = 1.5
#: How long processes get to return once their collectives failed.
CUT_WAIT_SECONDS = 2.0


def signal_processes(group: Group, processes: list[int], signum: int) -> None:
    """Send ``signum`` to the JAX processes ``processes`` (processes already gone are skipped)."""
    if processes:
        site.of(group).signal(group, processes, signum)


def stop_survivors(group: Group, dead: dict[int, str]) -> list[int]:
    """SIGKILL the processes still alive after a death: without a peer they could only wait
    for JAX's heartbeat. Returns the processes stopped (remote ones through ipyparallel)."""
    survivors = [p for p in group.indices if p not in dead]
    group.stopped_pids.update(group.processes[p].pid for p in survivors)
    site.kill(group, survivors)
    return survivors


def interrupt(group: Group, processes: list[int]) -> None:
    """SIGINT the processes (directly for local engines, else through ipyparallel).

    Requests they have not started yet are aborted first, so that a process
    that was still idle does not start the cell after the others stopped.
    """
    if not processes:
        return
    with contextlib.suppress(Exception):
        engines = [group.processes[p].engine_id for p in processes]
        group.client.abort(targets=engines, block=False)
    with contextlib.suppress(Exception):
        signal_processes(group, processes, signal.SIGINT)


def busy(group: Group, processes: list[int] | None = None) -> list[int]:
    """Processes whose engine is still running (or has queued) a request."""
    chosen = group.indices if processes is None else processes
    try:
        queues = group.client.queue_status()
    except Exception:  # a controller that does not answer: assume busy
        return list(chosen)
    return [p for p in chosen if queues.get(group.processes[p].engine_id, {}).get("queue", 0)]


def wait_idle(group: Group, processes: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for the processes to finish; those still busy."""
    deadline = time.monotonic() + seconds
    left = busy(group, processes)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = busy(group, left)
    return left


@dataclasses.dataclass
class Released:
    """What :func:`release` did: processes it had to cut free, and those still running."""

    blocked: list[int]
    left: list[int]

    @property
    def cut(self) -> bool:
        """True when collectives were cut (the group then needs a reset)."""
        return bool(self.blocked)


def release(group: Group, processes: list[int]) -> Released:
    """SIGINT ``processes``; if some still run after a grace, cut the group's collectives.

    A second ``KeyboardInterrupt`` stops the waiting, not the release.
    """
    interrupt(group, processes)
    blocked: list[int] = []
    try:
        left = wait_idle(group, processes, INTERRUPT_WAIT_SECONDS)
        if left and cut_collectives(group):
            blocked = left
            left = wait_idle(group, left, CUT_WAIT_SECONDS)
    except KeyboardInterrupt:
        left = busy(group, processes)
    return Released(blocked, left)


def can_cut(group: Group) -> bool:
    """Whether jaxnb may close this cluster's gloo connections (see ``site.Site.can_cut``)."""
    return site.of(group).can_cut(group)


def cut_collectives(group: Group) -> bool:
    """Shut down every gloo connection of every engine; False when none could be shut."""
    where = site.of(group)
    if not where.can_cut(group):
        return False
    cut_outcome.reset()
    done = where.cut_collectives(group)
    if done:
        group.group_cut = True
    return bool(done)
