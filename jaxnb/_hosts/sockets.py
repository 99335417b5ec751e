"""TCP connections of engine processes, and shutting some down (on the engines' host).

Self-contained (standard library and psutil only): the notebook uses it for
local engines, and sends this module's source to a remote host and runs it
there with :func:`main`, to cut the gloo connections of an engine blocked in a
collective.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import socket

_SYS_PIDFD_GETFD = 438  # same number on every Linux architecture


def connections(pids: list[int]) -> dict[str, list[list]]:
    """pid → [fd, local (ip, port), remote (ip, port)] of its established TCP connections."""
    import psutil

    found: dict[str, list[list]] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(pid).net_connections("tcp"):
                if c.raddr and c.status == psutil.CONN_ESTABLISHED and c.fd >= 0:
                    found.setdefault(str(pid), []).append(
                        [c.fd, [_ip(c.laddr[0]), c.laddr[1]], [_ip(c.raddr[0]), c.raddr[1]]]
                    )
    return found


def gloo_plan(listed: dict[str, dict[str, list[list]]], coordinator: str | None) -> dict:
    """Which connections to cut: host → pid → [[fd, local]], from each host's
    :func:`connections`. Kept: connections to another engine (the peer is one of the listed
    endpoints), except the coordination service's (``coordinator`` is ``host:port``)."""
    port = int(coordinator.rsplit(":", 1)[1]) if coordinator and ":" in coordinator else -1
    owned = {tuple(c[1]) for conns in listed.values() for cs in conns.values() for c in cs}
    plan: dict[str, dict[str, list]] = {}
    for location, conns in listed.items():
        for pid, cs in conns.items():
            for fd, local, peer in cs:
                if tuple(peer) not in owned:
                    continue  # the controller or the notebook: not another engine
                if port in (local[1], peer[1]):
                    continue  # jax.distributed's coordination service: keep it
                plan.setdefault(location, {}).setdefault(pid, []).append([fd, local])
    return plan


def shut_down(pid: int, fds: list[tuple[int, tuple[str, int]]],
              denied: list[int] | None = None) -> int:
    """Shut down the sockets ``fds`` of process ``pid`` (through ``pidfd_getfd``); how many.
    The descriptors the kernel would not hand over (no ptrace rights: Yama's
    ``ptrace_scope``, another user's process) are added to ``denied``."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return 0
    done = 0
    try:
        for fd, local in fds:
            dup = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if dup < 0:  # closed since we looked, or not allowed: nothing to cut
                if denied is not None and ctypes.get_errno() in (errno.EPERM, errno.EACCES):
                    denied.append(fd)
                continue
            try:
                sock = socket.socket(fileno=dup)
            except OSError:
                os.close(dup)
                continue
            with contextlib.suppress(OSError):
                name = sock.getsockname()
                if [_ip(name[0]), name[1]] == list(local):  # not a reused descriptor
                    sock.shutdown(socket.SHUT_RDWR)
                    done += 1
            sock.close()
    finally:
        os.close(pidfd)
    return done


def ptrace_scope() -> int | None:
    """Yama's ``ptrace_scope`` on this host (1, Ubuntu's and Debian's default: only a process's
    ancestors may take its descriptors); None without Yama."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def cut(plan: dict[str, list]) -> dict:
    """Shut down the planned sockets (pid → [[fd, local]]): how many were cut, how many the
    kernel denied, and Yama's ``ptrace_scope`` here."""
    denied: list[int] = []
    done = sum(shut_down(int(pid), fds, denied) for pid, fds in plan.items())
    return {"cut": done, "denied": len(denied), "ptrace_scope": ptrace_scope()}


def _ip(ip: str) -> str:
    return ip.removeprefix("::ffff:")


def main(request: str) -> None:
    """``{"list": [pid, ...]}`` or ``{"cut": {pid: [[fd, [ip, port]], ...]}}``; prints JSON."""
    job = json.loads(request)
    if "list" in job:
        print(json.dumps(connections(job["list"])))
    else:
        print(json.dumps(cut(job["cut"])))

