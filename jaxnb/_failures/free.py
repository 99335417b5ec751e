"""Free processes that are still running after a failure, a timeout or an interrupt.

Signals go to local engines by pid (they run without ipyparallel's nanny
process, which saves a Python process per engine at start) and to remote
engines through ipyparallel's ``send_signal``, which their nanny carries out.

First SIGINT (a ``KeyboardInterrupt`` at the next Python line). A process
blocked inside a gloo collective does not get back to Python until XLA's
collective timeout, so jaxnb then closes the TCP connections of the group's
gloo contexts (local engines only, from the notebook, with ``pidfd_getfd``):
the blocked collective fails at once, and every later collective on the old
group fails loudly instead of pairing with a stale one. The group must then be
re-initialised (:func:`jaxnb._failures.repair.reset`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.state import Group
from jaxnb._failures import detect
from jaxnb._hosts import remote_release, sockets

#: How long processes get to stop after SIGINT before their collectives are cut.
INTERRUPT_WAIT_SECONDS = 1.5
#: How long processes get to return once their collectives failed.
CUT_WAIT_SECONDS = 2.0


#: How long survivors of a death get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 2.0


def signal_processes(group: Group, processes: list[int], signum: int) -> None:
    """Send ``signum`` to the JAX processes ``processes`` (processes already gone are skipped)."""
    if not processes:
        return
    if group.options.is_local:
        for p in processes:
            with contextlib.suppress(OSError):
                os.kill(group.processes[p].pid, signum)
        return
    engines = [group.processes[p].engine_id for p in processes]
    group.client.send_signal(signum, targets=engines, block=True)


def stop_survivors(group: Group, dead: dict[int, str]) -> list[int]:
    """SIGKILL the processes still alive after a death: without a peer they could only wait
    for JAX's heartbeat. Returns the processes stopped (remote ones through ipyparallel)."""
    survivors = [p for p in group.indices if p not in dead]
    with contextlib.suppress(Exception):
        signal_processes(group, survivors, signal.SIGKILL)
    if group.options.is_local:  # wait until they are gone (they are our children)
        launchers = [detect.launcher_of(group, group.processes[p].pid) for p in survivors]
        killed = [ipp_internals.launcher_process(launcher) for launcher in launchers if launcher is not None]
        detect.wait_gone([k for k in killed if k is not None], KILL_WAIT_SECONDS, poll=0.01)
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
    """Whether jaxnb may close this cluster's gloo connections.

    For local engines and engines on ``--hosts`` (on Linux), and only when jaxnb owns the group (not
    ``--no-init``), since the group must be re-initialised afterwards.
    """
    return group.options.init and hasattr(os, "pidfd_open") and (
        group.options.is_local or bool(group.options.hosts)  # remote: on their hosts, over ssh
    )


def gloo_sockets(group: Group) -> dict[int, list[tuple[int, tuple[str, int]]]]:
    """pid → (fd, local address) of TCP connections between engines, not to the coordinator."""
    pids = [info.pid for info in group.processes]
    coordinator = group.coordinator or ""
    coordinator_port = int(coordinator.rsplit(":", 1)[1]) if ":" in coordinator else -1
    connections = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            connections[pid] = psutil.Process(pid).net_connections("tcp")
    owner = {_endpoint(c.laddr): pid for pid, cs in connections.items() for c in cs if c.laddr}
    found: dict[int, list[tuple[int, tuple[str, int]]]] = {}
    for pid, cs in connections.items():
        for c in cs:
            if not c.raddr or c.status != psutil.CONN_ESTABLISHED or c.fd < 0:
                continue
            if owner.get(_endpoint(c.raddr)) is None:
                continue  # the controller: not another engine
            if coordinator_port in (c.laddr.port, c.raddr.port):
                continue  # jax.distributed's coordination service: keep it
            found.setdefault(pid, []).append((c.fd, _endpoint(c.laddr)))
    return found


def cut_collectives(group: Group) -> bool:
    """Shut down every gloo connection of every engine; False when none could be shut."""
    if not can_cut(group):
        return False
    if group.options.is_local:
        done = sum(sockets.shut_down(pid, fds) for pid, fds in gloo_sockets(group).items())
    else:
        done = remote_release.cut(group)
    if done:
        group.group_cut = True
    return bool(done)


def _endpoint(addr: tuple) -> tuple[str, int]:
    ip, port = addr[0], addr[1]
    return ip.removeprefix("::ffff:"), port
