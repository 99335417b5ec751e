"""What a folder's mount offers for file locks (``/proc/self/mountinfo``), said in one line.

``flock`` fails with ``ENOLCK`` on NFS mounted ``nolock`` and with ``ENOSYS``/``EOPNOTSUPP``
on Lustre mounted without ``flock``; NFS mounted ``local_lock=flock`` (or ``all``) grants
``flock`` on each host alone, so a kernel on another host never sees it. In both cases
:class:`jaxnb._core.file_lock.FileLock` holds a lease written in the lock file instead, as
the tune lease does (:mod:`jaxnb._tune.lease`).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import sys

#: ``flock``'s errors that mean "this filesystem has no such locks" (not "someone holds it").
NO_LOCKS = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})

NONE_HERE = ("jaxnb: the {fs} mount at {point} has no file locks ({why}: NFS mounted nolock, or "
             "Lustre without -o flock); {path} is held by a lease written in it instead, renewed "
             "every {renew:g} s and taken over {lease:g} s after its holder stops renewing")
HOST_LOCAL = ("jaxnb: the {fs} mount at {point} keeps file locks on each host ({opt}), so a kernel "
              "on another host would not see {path}'s lock; it is held by a lease written in it "
              "too, renewed every {renew:g} s")

_said: set[tuple[str, str]] = set()


@dataclasses.dataclass(frozen=True)
class Mount:
    """The mount a path is on: its mount point, filesystem type and options."""

    point: str = "/"
    fs: str = "unknown"
    options: tuple[str, ...] = ()

    def host_local_locks(self) -> str | None:
        """``local_lock=flock`` (or ``=all``) on an NFS mount: locks that only this host sees."""
        for opt in self.options:
            if self.fs.startswith("nfs") and opt in ("local_lock=flock", "local_lock=all"):
                return opt
        return None


def mount_of(path: str) -> Mount:
    """The mount that holds ``path`` (the longest mount point above it)."""
    path = os.path.realpath(path)
    best = Mount()
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.readlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 6:
            continue
        point = fields[4].replace("\\040", " ")
        after = line.split(" - ", 1)[1].split()
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.point):
            opts = fields[5].split(",") + (after[2].split(",") if len(after) > 2 else [])
            best = Mount(point, after[0] if after else "unknown", tuple(opts))
    return best


def say_once(template: str, path: str, **values: object) -> None:
    """Print ``template`` (one of this module's) once per lock file and kind."""
    if (template, path) in _said:
        return
    _said.add((template, path))
    mount = mount_of(os.path.dirname(path) or ".")
    print(template.format(fs=mount.fs, point=mount.point, path=path,
                          opt=mount.host_local_locks(), **values), file=sys.stderr)
