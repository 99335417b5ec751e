"""Free processes that are still running after a failure, a timeout or an interrupt.

First SIGINT (a ``KeyboardInterrupt`` at the next Python line). A process
blocked inside a gloo collective does not get back to Python until XLA's
collective timeout, so jaxnb then closes the TCP connections of the group's
gloo contexts (local engines only, from the notebook, with ``pidfd_getfd``):
the blocked collective fails at once, and every later collective on the old
group fails loudly instead of pairing with a stale one. The group must then be
re-initialised (:func:`jaxnb._repair.reset`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import signal
import socket
import time
from typing import TYPE_CHECKING

import psutil

from jaxnb._signals import signal_processes

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

#: How long processes get to stop after SIGINT before their collectives are cut.
INTERRUPT_WAIT_SECONDS = 1.5
#: How long processes get to return once their collectives failed.
CUT_WAIT_SECONDS = 2.0
_SYS_PIDFD_GETFD = 438  # same number on every Linux architecture


def interrupt(cluster: JaxCluster, processes: list[int]) -> None:
    """SIGINT the processes (directly for local engines, else through ipyparallel).

    Requests they have not started yet are aborted first, so that a process
    that was still idle does not start the cell after the others stopped.
    """
    if not processes:
        return
    with contextlib.suppress(Exception):
        engines = [cluster.processes[p].engine_id for p in processes]
        cluster.client.abort(targets=engines, block=False)
    with contextlib.suppress(Exception):
        signal_processes(cluster, processes, signal.SIGINT)


def busy(cluster: JaxCluster, processes: list[int] | None = None) -> list[int]:
    """Processes whose engine is still running (or has queued) a request."""
    chosen = cluster.process_indices if processes is None else processes
    try:
        queues = cluster.client.queue_status()
    except Exception:  # a controller that does not answer: assume busy
        return list(chosen)
    return [p for p in chosen if queues.get(cluster.processes[p].engine_id, {}).get("queue", 0)]


def wait_idle(cluster: JaxCluster, processes: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for the processes to finish; those still busy."""
    deadline = time.monotonic() + seconds
    left = busy(cluster, processes)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = busy(cluster, left)
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


def release(cluster: JaxCluster, processes: list[int]) -> Released:
    """SIGINT ``processes``; if some still run after a grace, cut the group's collectives.

    A second ``KeyboardInterrupt`` stops the waiting, not the release.
    """
    interrupt(cluster, processes)
    blocked: list[int] = []
    try:
        left = wait_idle(cluster, processes, INTERRUPT_WAIT_SECONDS)
        if left and cut_collectives(cluster):
            blocked = left
            left = wait_idle(cluster, left, CUT_WAIT_SECONDS)
    except KeyboardInterrupt:
        left = busy(cluster, processes)
    return Released(blocked, left)


def can_cut(cluster: JaxCluster) -> bool:
    """Whether jaxnb may close this cluster's gloo connections.

    For local engines and engines on ``--hosts`` (on Linux), and only when jaxnb owns the group (not
    ``--no-init``), since the group must be re-initialised afterwards.
    """
    return cluster.options.init and hasattr(os, "pidfd_open") and (
        cluster.options.is_local or bool(cluster.options.hosts)  # remote: on their hosts, over ssh
    )


def gloo_sockets(cluster: JaxCluster) -> dict[int, list[tuple[int, tuple[str, int]]]]:
    """pid → (fd, local address) of TCP connections between engines, not to the coordinator."""
    pids = [info.pid for info in cluster.processes]
    coordinator = cluster.coordinator_address or ""
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


def cut_collectives(cluster: JaxCluster) -> bool:
    """Shut down every gloo connection of every engine; False when none could be shut."""
    if not can_cut(cluster):
        return False
    if cluster.options.is_local:
        done = sum(_shut_down(pid, fds) for pid, fds in gloo_sockets(cluster).items())
    else:
        from jaxnb import _remote_release

        done = _remote_release.cut(cluster)
    if done:
        cluster._group_cut = True
    return bool(done)


def _shut_down(pid: int, fds: list[tuple[int, tuple[str, int]]]) -> int:
    """Shut down the sockets ``fds`` of process ``pid`` (through ``pidfd_getfd``); how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return 0
    done = 0
    try:
        for fd, local in fds:
            dup = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:
                continue  # closed since we looked, or not allowed: nothing to cut
            try:
                sock = socket.socket(fileno=dup)
            except OSError:
                os.close(dup)
                continue
            with contextlib.suppress(OSError):
                if _endpoint(sock.getsockname()) == local:  # not a reused descriptor
                    sock.shutdown(socket.SHUT_RDWR)
                    done += 1
            sock.close()
    finally:
        os.close(pidfd)
    return done


def _endpoint(addr: tuple) -> tuple[str, int]:
    ip, port = addr[0], addr[1]
    return ip.removeprefix("::ffff:"), port
