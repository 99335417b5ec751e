"""A lock whose holder is gone: said so, and broken on request (``--break-lock``).

A run lock is an OS lock, dropped when its holder dies, so a lock still held names a holder
that lives, with two exceptions:

- on this host, a process the holder forked (``multiprocessing``'s fork, a subprocess that
  kept the descriptor) holds it after the holder itself ended: the pid it names is dead, and
  the refusal says the lock is stale;
- on NFS, a lock taken by a host that crashed stays on the server until that host comes back
  (NFSv3) or for a grace period (NFSv4); jaxnb cannot test a pid on another host.

``--break-lock`` removes the lock file, so the next run locks a new file (a holder checks after
``flock`` that the path still names the file it locked: :mod:`.file_lock`). It refuses while
the holder may still run: on this host while its pid runs, on another host while that host
answers on the network (its ssh port), since jaxnb cannot tell from here whether the pid runs.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from jaxnb._core.file_lock import FileLock, Holder
from jaxnb._core.spelling import example

#: How long a holder's host has to answer before it counts as unreachable.
ANSWER_SECONDS = 3.0
#: The port asked (ssh's: a host in a cluster that runs, answers on it, or refuses it).
PORT = 22

STALE = ("{what} is locked by pid {pid} on this host, which has ended: a process it started "
         "(multiprocessing's fork, a subprocess) still holds {path}; end that process, or pass "
         "{flag}")
ALIVE_HERE = ("{path} is held by pid {pid} on this host, which still runs; {flag} breaks only a "
              "lock whose holder is gone: stop that process or wait for its run to end")
ANSWERS = ("{path} is held by pid {pid} on {host}, which {why}, and jaxnb cannot tell from here "
           "whether that pid still runs; stop it there, or delete {path} yourself once sure it "
           "is gone")
UNKNOWN = ("{path} is held by a process that did not write who it is, and jaxnb cannot tell "
           "whether it still runs; delete {path} yourself once sure it is gone")
BROKE = "jaxnb: broke the lock {path}, held by {holder}: {why}"


def flag() -> str:
    return example("break_lock", True)


def stale(what: str, path: str, holder: Holder) -> str | None:
    """The refusal for a lock whose holder on this host has ended (None when it runs, or
    runs elsewhere)."""
    if holder.on_this_host() and not holder.alive_here():
        return STALE.format(what=what, pid=holder.pid, path=path, flag=flag())
    return None


def host_answers(host: str) -> str | None:
    """Why ``host`` counts as reachable (it answered on :data:`PORT`, or refused it), or None
    when it does not answer (no such name, no route, no answer in :data:`ANSWER_SECONDS`)."""
    try:
        with socket.create_connection((host, PORT), timeout=ANSWER_SECONDS):
            return f"answers on port {PORT}"
    except ConnectionRefusedError:
        return f"answers (it refused port {PORT})"
    except OSError:
        return None


def break_lock(path: str) -> bool:
    """Remove the lock file ``path`` when its holder is gone (True; a line says so); False
    when no one holds it. ``FileExistsError`` (one line) while the holder may still run."""
    lock = FileLock(path)
    holder = lock.acquire()
    if holder is None:
        lock.release()
        return False
    if not holder.pid:
        raise FileExistsError(UNKNOWN.format(path=path))
    if holder.on_this_host():
        if holder.alive_here():
            raise FileExistsError(ALIVE_HERE.format(path=path, pid=holder.pid, flag=flag()))
        why = "its pid has ended on this host"
    else:
        answer = host_answers(holder.host)
        if answer is not None:
            raise FileExistsError(ANSWERS.format(path=path, pid=holder.pid, host=holder.host,
                                                 why=answer))
        why = f"{holder.host} does not answer on the network"
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
    print(BROKE.format(path=path, holder=holder.describe(), why=why), file=sys.stderr)
    return True
