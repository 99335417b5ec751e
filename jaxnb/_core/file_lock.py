"""An OS lock on a file (``fcntl.flock``) that names the process holding it.

The operating system drops the lock when the holding process dies, so a crashed
kernel never leaves a folder locked. The holder writes who it is (pid, host,
since when) into the lock file, so a refusal can name it. The descriptor is not
inherited by the processes the kernel starts (Python's default), so only the
kernel itself holds the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lock, as it wrote itself into the lock file (``pid`` 0: not known)."""

    pid: int = 0
    host: str = ""
    since: float = 0.0

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def describe(self) -> str:
        """``pid 123 on host, since 12:03:04``, or what is known of it."""
        if not self.pid:
            return "a process that has not said which yet"
        since = time.strftime(", since %H:%M:%S", time.localtime(self.since)) if self.since else ""
        return f"pid {self.pid} on {self.host or 'an unnamed host'}{since}"


class FileLock:
    """An exclusive ``flock`` on ``path`` (made, with its folder, if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: bool = False) -> Holder | None:
        """Take the lock: ``None`` once held; the holder instead when another holds it
        (``wait``: block until it is free)."""
        if self._fd is not None:
            return None
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return holder(self.path)
        except BaseException:
            os.close(fd)
            raise
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self._fd = fd
        return None

    def release(self) -> None:
        """Drop the lock (the file stays: removing it could let two processes hold two files)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock

    @contextlib.contextmanager
    def waited(self) -> Iterator[None]:
        """Hold the lock for a ``with`` block, waiting for it if another process holds it."""
        self.acquire(wait=True)
        try:
            yield
        finally:
            self.release()


def holder(path: str) -> Holder:
    """Who wrote itself into the lock file ``path`` (``Holder()`` when it cannot be read)."""
    try:
        with open(path) as f:
            record = json.load(f)
        return Holder(int(record["pid"]), str(record["host"]), float(record["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Holder()
