"""An OS lock on a file (``fcntl.flock``) that names the process holding it.

The operating system drops the lock when the holding process dies, so a crashed
kernel never leaves a folder locked. The holder writes who it is (pid, host,
since when) into the lock file, so a refusal can name it. The descriptor is not
inherited by the processes the kernel starts (Python's default), and a child the kernel
forks closes it (``os.register_at_fork``), so only the kernel itself holds the lock.

The lock file is opened without following links (:mod:`.safe_files`). After ``flock`` the
holder checks that the file it locked is still the one at the path (a release or
``--break-lock`` may have removed it meanwhile) and tries again if not, so removing a lock
file never lets two processes hold two files. Where the filesystem has no ``flock`` (NFS
``nolock``, Lustre without ``flock``), or shares it with no other host (NFS ``local_lock``),
the holder also writes a lease (``until``) into the file and renews it on a thread, as the
tune lease does (:mod:`.lock_mounts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

from jaxnb._core import lock_mounts, safe_files

#: A lease not renewed for this long is taken for dead (as the tune lease's).
LEASE_SECONDS = 60.0

NOT_OURS = ("{path} belongs to {owner} and this user cannot write it (an earlier run of theirs); "
            "pass another name for a run of your own, or ask {owner} to remove it")

_held: set[int] = set()  # descriptors this process holds locks on (closed in forked children)


def _close_held_in_child() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lock, as it wrote itself into the lock file (``pid`` 0: not known;
    ``until``: its lease's end, where the filesystem has no shared locks)."""

    pid: int = 0
    host: str = ""
    since: float = 0.0
    until: float = 0.0

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def on_this_host(self) -> bool:
        return bool(self.pid) and self.host == socket.gethostname()

    def alive_here(self) -> bool:
        """On this host: whether its pid runs (True when it runs elsewhere: not known here)."""
        if not self.on_this_host():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process
        return True

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
        self._lease: threading.Event | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: bool = False) -> Holder | None:
        """Take the lock: ``None`` once held; the holder instead when another holds it
        (``wait``: block until it is free). A link at the path raises
        :class:`~jaxnb._core.safe_files.LinkRefusedError`."""
        while self._fd is None:
            try:
                fd = safe_files.open_fd(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except safe_files.LinkRefusedError:
                raise
            except PermissionError:  # another user's lock file: held by them, or refused
                if not os.path.lexists(self.path):
                    raise  # a folder this user cannot write
                return self._not_ours()
            try:
                got = self._take(fd, wait)
            except BaseException:
                os.close(fd)
                raise
            if got is not None:  # held by another
                os.close(fd)
                return got
            if self._fd is None:
                os.close(fd)  # the file was removed or replaced meanwhile: lock the new one
        return None

    def _not_ours(self) -> Holder:
        """Another user's lock file: its holder while they hold it, else a one-line refusal."""
        fd = safe_files.open_fd(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return read_holder(fd)  # held (or no locks here: its record is all there is)
        finally:
            os.close(fd)
        owner = os.stat(self.path).st_uid
        raise PermissionError(NOT_OURS.format(path=self.path, owner=_user(owner)))

    def _take(self, fd: int, wait: bool) -> Holder | None:
        """Lock ``fd``: ``None`` when taken (``self._fd`` set, or left unset when the path
        no longer names the file), else the holder."""
        leased = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return read_holder(fd)
        except OSError as exc:
            if exc.errno not in lock_mounts.NO_LOCKS:
                raise
            lock_mounts.say_once(lock_mounts.NONE_HERE, self.path, why=exc.strerror,
                                 renew=LEASE_SECONDS / 3, lease=LEASE_SECONDS)
            leased = True
        if not _same_file(fd, self.path):
            return None
        if not leased and lock_mounts.mount_of(os.path.dirname(self.path)).host_local_locks():
            lock_mounts.say_once(lock_mounts.HOST_LOCAL, self.path, renew=LEASE_SECONDS / 3)
            leased = True
        if leased:
            while True:
                other = read_holder(fd)
                if not _lease_live(other):
                    break
                if not wait:
                    return other
                time.sleep(1.0)
        self._fd = fd
        _held.add(fd)
        self._write(time.time() + LEASE_SECONDS if leased else 0.0)
        if leased:
            self._lease = threading.Event()
            threading.Thread(target=self._renew, args=(self._lease,), daemon=True,
                             name=f"jaxnb-lock-{os.path.basename(self.path)}").start()
        return None

    def _write(self, until: float) -> None:
        fd = self._fd
        if fd is None:
            return
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        if until:
            me["until"] = until
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)

    def _renew(self, done: threading.Event) -> None:
        while not done.wait(LEASE_SECONDS / 3):
            with contextlib.suppress(OSError):
                self._write(time.time() + LEASE_SECONDS)

    def release(self) -> None:
        """Drop the lock (the file stays, empty)."""
        if self._lease is not None:
            self._lease.set()
            self._lease = None
        fd, self._fd = self._fd, None
        if fd is not None:
            _held.discard(fd)
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


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, not replaced)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev)


def _lease_live(other: Holder) -> bool:
    """A lease written by another process that has not run out (nor died on this host)."""
    if not other.until or other.until < time.time():
        return False
    return other.alive_here()


def read_holder(fd: int) -> Holder:
    """Who wrote itself into the open lock file ``fd`` (``Holder()`` when it cannot be read)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode())
        return Holder(int(record["pid"]), str(record["host"]), float(record["since"]),
                      float(record.get("until", 0.0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Holder()


def holder(path: str) -> Holder:
    """Who wrote itself into the lock file ``path`` (``Holder()`` when it cannot be read)."""
    try:
        fd = safe_files.open_fd(path, os.O_RDONLY)
    except OSError:
        return Holder()
    try:
        return read_holder(fd)
    finally:
        os.close(fd)
