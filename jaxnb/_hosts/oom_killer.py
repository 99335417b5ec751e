"""Was an engine killed by the kernel's OOM killer? The kernel log says so (``/dev/kmsg``, or
``dmesg`` where that cannot be read); an engine killed by SIGKILL whose pid the log names as
an out-of-memory kill since the engine started is reported as such, not as a plain SIGKILL."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time

#: How a death by the OOM killer is said (after ``[p1] (pid 123 on host)``).
KILLED = "was killed by the kernel's OOM killer (host memory)"
#: The kernel's lines for an OOM kill (the whole host, or a memory cgroup's limit).
_KILL = re.compile(r"(?:Out of memory|Memory cgroup out of memory)[^:]*: Killed process (\d+)"
                   r"|oom-kill:.*?[ ,]pid=(\d+)")
#: ``dmesg``'s ``[ 4590.882854] text`` and /dev/kmsg's ``6,1234,4590882854,-;text``.
_DMESG = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_KMSG = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$")
#: How much of the kernel log is read at most (bytes).
MAX_BYTES = 4 * 2**20


def killed_pids(log: str, since: float | None = None) -> set[int]:
    """The pids the kernel log ``log`` names as killed for lack of memory; with ``since``
    (seconds since boot), only kills logged after it (a pid can be reused)."""
    found = set()
    for line in log.splitlines():
        at, text = None, line
        for form in (_DMESG, _KMSG):
            match = form.match(line)
            if match:
                at, text = float(match.group(1)), match.group(2)
                at = at / 1e6 if form is _KMSG else at
                break
        kill = _KILL.search(text)
        if kill and (since is None or at is None or at >= since):
            found.add(int(kill.group(1) or kill.group(2)))
    return found


def kernel_log() -> str:
    """This host's kernel log ("" where it cannot be read): /dev/kmsg, else ``dmesg``."""
    records = []
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        fd = None
    if fd is not None:
        try:
            size = 0
            while size < MAX_BYTES:
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:  # read to the end
                    break
                except OSError:  # EPIPE: a record was overwritten while reading; go on
                    continue
                if not record:
                    break
                records.append(record.decode("utf-8", "replace").rstrip("\n"))
                size += len(record)
        finally:
            os.close(fd)
        if records:
            return "\n".join(records)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
        return done.stdout
    return ""


def seconds_since_boot(epoch: float) -> float:
    """``epoch`` (``time.time()`` seconds) on the kernel log's clock (``CLOCK_MONOTONIC``)."""
    return epoch - (time.time() - time.monotonic())


def since_start(uptime_line: str, elapsed: float | None) -> float | None:
    """When a process on another host started, on that host's kernel-log clock: its uptime
    (``/proc/uptime``'s first field) less the seconds since it started, less 1 s (``None``:
    unknown). Only durations cross machines: no clock needs to agree with this one's."""
    try:
        uptime = float(uptime_line.split()[0])
    except (IndexError, ValueError):
        return None
    return None if elapsed is None else uptime - elapsed - 1.0


def killed_here(pid: int, started: float | None = None) -> bool:
    """Whether this host's kernel log names ``pid`` as killed by the OOM killer (since
    ``started``, the process's start as ``time.time()``)."""
    since = None if started is None else seconds_since_boot(started) - 1.0
    return pid in killed_pids(kernel_log(), since)
