"""TCP connections of engine processes, and shutting some down (on the engines' host).

Self-contained (standard library and psutil only): the notebook uses it for
local engines, and sends this module's source to a remote host and runs it
there with :func:`main`, to cut the gloo connections of an engine blocked in a
collective.
"""

from __future__ import annotations

import contextlib
import ctypes
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


def shut_down(pid: int, fds: list[tuple[int, tuple[str, int]]]) -> int:
    """Shut down the sockets ``fds`` of process ``pid`` (through ``pidfd_getfd``); how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
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
                name = sock.getsockname()
                if [_ip(name[0]), name[1]] == list(local):  # not a reused descriptor
                    sock.shutdown(socket.SHUT_RDWR)
                    done += 1
            sock.close()
    finally:
        os.close(pidfd)
    return done


def _ip(ip: str) -> str:
    return ip.removeprefix("::ffff:")


def main(request: str) -> None:
    """``{"list": [pid, ...]}`` or ``{"cut": {pid: [[fd, [ip, port]], ...]}}``; prints JSON."""
    job = json.loads(request)
    if "list" in job:
        print(json.dumps(connections(job["list"])))
    else:
        print(json.dumps(sum(shut_down(int(pid), fds) for pid, fds in job["cut"].items())))

