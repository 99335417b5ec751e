"""The compilation cache's folder: made 0700, refused when someone else could write it.

XLA's persistent cache holds executables that the engines load and run, so a cache folder that
another user can write lets them run code in this job. The default folder and any
``--compile-cache DIR`` are made with mode 0700 when missing, and refused (the cache turned off,
the reason shown by ``%jax_cluster status``) when they are writable by group or others, or
belong to another user. Standard library only.
"""

from __future__ import annotations

import os
import pwd
import stat

WRITABLE = ("{folder} is writable by {who}, mode {mode}: the cache holds executables this job "
            "runs, so anyone who can write it could run code in the job; chmod 700 it")
NOT_YOURS = ("{folder} belongs to {owner}, not to {me}: the cache holds executables this job "
             "runs, so only a folder of yours is used")
CANNOT_MAKE = "{folder} cannot be made: {why}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def refusal(folder: str) -> str | None:
    """Make ``folder`` (0700) if missing; ``None`` when only this user can write it, else why it
    is not used (one line, cause first)."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
    except OSError as exc:
        return CANNOT_MAKE.format(folder=folder, why=exc.strerror or exc)
    me = os.geteuid()
    if info.st_uid != me:
        return NOT_YOURS.format(folder=folder, owner=_user(info.st_uid), me=_user(me))
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
                           if info.st_mode & bit)
        return WRITABLE.format(folder=folder, who=who, mode=stat.filemode(info.st_mode))
    return None
