"""One live search per study: an OS lock the search's kernel holds, and a lease it renews.

A search holds ``DIR/STUDY/search.lock`` (``fcntl.flock``) from opening the study to its end,
so creating the study if absent, taking a dead search's trials over and running trials are
one kernel's at a time; the OS drops the lock when the kernel dies. A search on another
machine may hold its lock where this one cannot see it (a network filesystem that does not
share locks): the lease in the study (user attribute ``jaxnb_lease``: who, until when),
renewed every ``LEASE_SECONDS / 3``, covers that case. ``--resume`` takes over the RUNNING
trials of a search on this machine as soon as its lock is free, and of one on another machine
once its lease has run out.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import uuid
from typing import Any

from jaxnb._core import lock_break
from jaxnb._core.file_lock import FileLock
from jaxnb._core.spelling import example

LOCK_FILE = "search.lock"
KEY = "jaxnb_lease"
#: A search on another machine that has not renewed its lease for this long is taken for dead.
LEASE_SECONDS = 60.0

LIVE_HERE = ("study {name!r} in {dir} is being run by a search in this kernel (--background); "
             "wait for it to end or stop it (its result's stop()), then pass {resume}")
LIVE_ELSEWHERE = ("study {name!r} in {dir} is being run by a live search in another kernel "
                  "({holder}); wait for it to end or stop it there, then pass {resume}")
LEASED = ("study {name!r} in {dir} is being run by a search on {host} (pid {pid}) whose lease "
          "runs until {until}; wait for it to end or stop it there (a search whose kernel died is "
          "taken over once its lease runs out, {seconds:g} s after its last renewal)")
TAKEN_OVER = ("another kernel took study {name!r} over: this search had not renewed its lease "
              "in time (was the machine asleep?); its results are in the study")


@dataclasses.dataclass(frozen=True)
class Lease:
    """A search's claim on its study, as the study records it."""

    owner: str
    host: str
    pid: int
    until: float

    @classmethod
    def of(cls, study: Any) -> Lease | None:
        """The study's lease (read anew from the journal), or None."""
        record = study.user_attrs.get(KEY)
        try:
            return cls(str(record["owner"]), str(record["host"]), int(record["pid"]),
                       float(record["until"]))
        except (TypeError, KeyError, ValueError):
            return None

    def live_elsewhere(self, now: float | None = None) -> bool:
        """Held by a search on another machine whose lease has not run out."""
        return self.host != socket.gethostname() and self.until > (time.time() if now is None else now)


def lock(folder: str, name: str) -> FileLock:
    """Take the study's lock; ``FileExistsError`` naming the search that holds it."""
    held = FileLock(os.path.join(folder, LOCK_FILE))
    holder = held.acquire()
    if holder is None:
        return held
    resume = example("resume", True)
    if holder.is_this_process():
        raise FileExistsError(LIVE_HERE.format(name=name, dir=folder, resume=resume))
    stale = lock_break.stale(f"study {name!r} in {folder}", held.path, holder)
    if stale is not None:
        raise FileExistsError(stale)
    raise FileExistsError(LIVE_ELSEWHERE.format(name=name, dir=folder, holder=holder.describe(),
                                                resume=resume))


def break_lock(folder: str) -> bool:
    """``--break-lock``: remove the study's lock when its holder is gone (see
    :mod:`jaxnb._core.lock_break`); False when no one held it."""
    return lock_break.break_lock(os.path.join(os.path.abspath(folder), LOCK_FILE))


class Hold:
    """This search's hold on its study: the lock, and the lease renewed on a thread."""

    def __init__(self, study: Any, locked: FileLock, name: str, folder: str) -> None:
        lease = Lease.of(study)
        if lease is not None and lease.live_elsewhere():
            raise FileExistsError(LEASED.format(
                name=name, dir=folder, host=lease.host, pid=lease.pid, seconds=LEASE_SECONDS,
                until=time.strftime("%H:%M:%S", time.localtime(lease.until))))
        self.study, self.locked, self.name = study, locked, name
        self.owner = uuid.uuid4().hex
        self.lost = False
        self._done = threading.Event()
        self._write(time.time() + LEASE_SECONDS)
        self._thread = threading.Thread(target=self._renew, name=f"jaxnb-lease-{name}", daemon=True)
        self._thread.start()

    def _write(self, until: float) -> None:
        self.study.set_user_attr(KEY, {"owner": self.owner, "host": socket.gethostname(),
                                       "pid": os.getpid(), "until": until})

    def _renew(self) -> None:
        while not self._done.wait(LEASE_SECONDS / 3):
            lease = Lease.of(self.study)
            if lease is None or lease.owner != self.owner:
                self.lost = True
                return
            self._write(time.time() + LEASE_SECONDS)

    def taken_over(self) -> str | None:
        """Why the search must end now, if another kernel took the study over."""
        return TAKEN_OVER.format(name=self.name) if self.lost else None

    def release(self) -> None:
        """End the lease (when still ours) and drop the lock."""
        self._done.set()
        self._thread.join()
        try:
            lease = Lease.of(self.study)
            if lease is not None and lease.owner == self.owner:
                self._write(0.0)
        finally:
            self.locked.release()
