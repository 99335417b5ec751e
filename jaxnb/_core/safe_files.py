"""Files jaxnb creates in run folders and studies, opened without following links.

A run folder may sit on storage that other users can write (team storage, a shared scratch
folder). A symbolic link planted there at a name jaxnb writes (``run.lock``,
``trial.json``, ``datasets/process_0.jsonl``) would make the user's job truncate and
overwrite a file of theirs outside the folder. So every such file is opened relative to an
opened folder with ``O_NOFOLLOW``, the folders jaxnb makes inside the run folder too;
whole-file writes go to a fresh temporary file (``O_EXCL``) that is then renamed over the
name. A link where jaxnb writes is refused in one line that names it
(:class:`LinkRefusedError`). The folder the user named (``--storage``, the run folder
itself) may be a link: the user chose it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from typing import TextIO, cast

REFUSED = ("{path} is a symbolic link{to}: jaxnb does not write through links in a run folder "
           "(anyone who can write {folder} could have planted it); remove it, or use a folder "
           "only you can write")
NOT_A_FILE = ("{path} is not a regular file ({kind}): jaxnb writes only regular files in a run "
              "folder; remove it, or use a folder only you can write")


class LinkRefusedError(PermissionError):
    """A link (or a device, a pipe) found where jaxnb writes; the message names it."""


def refused(path: str) -> LinkRefusedError:
    """The one-line refusal for ``path`` (a link, or another non-regular entry)."""
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    folder = os.path.dirname(path) or "."
    if info is None or stat.S_ISLNK(info.st_mode):
        try:
            to = f" (to {os.readlink(path)})"
        except OSError:
            to = ""
        return _error(errno.ELOOP, REFUSED.format(path=path, to=to, folder=folder))
    kind = "a folder" if stat.S_ISDIR(info.st_mode) else f"mode {stat.filemode(info.st_mode)}"
    return _error(errno.EPERM, NOT_A_FILE.format(path=path, kind=kind))


def _error(number: int, text: str) -> LinkRefusedError:
    error = LinkRefusedError(text)  # str() is the line alone, without "[Errno N]"
    error.errno = number
    return error


@contextlib.contextmanager
def folder_fd(folder: str, within: str | None = None) -> Iterator[int]:
    """An open descriptor of ``folder``, made if missing. The part of it below ``within``
    (a folder above it, the one the user named) is made and entered one name at a time
    without following links."""
    folder = os.path.abspath(folder)
    top = os.path.abspath(within) if within is not None else folder
    rel = os.path.relpath(folder, top)
    if rel.startswith(os.pardir):
        top, rel = folder, os.curdir
    os.makedirs(top, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = top
    try:
        for name in [] if rel == os.curdir else rel.split(os.sep):
            here = os.path.join(here, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise refused(here) from None
                raise
            os.close(fd)
            fd = sub
        yield fd
    finally:
        os.close(fd)


def open_fd(path: str, flags: int, mode: int = 0o644, within: str | None = None) -> int:
    """``os.open(path, flags, mode)`` without following a link at ``path`` (or in the folders
    below ``within``); a link or a non-regular file there raises :class:`LinkRefusedError`."""
    path = os.path.abspath(path)
    with folder_fd(os.path.dirname(path), within) as dfd:
        name = os.path.basename(path)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode,
                         dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise refused(path) from None
            raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused(path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_text(path: str, mode: str = "w", within: str | None = None) -> TextIO:
    """A text file at ``path`` like ``open(path, mode)`` (``"w"`` or ``"a"``), without
    following links (:func:`open_fd`)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = open_fd(path, flags, within=within)
    return cast(TextIO, open(fd, mode, encoding="utf-8"))


def write_whole(path: str, data: bytes, within: str | None = None, sync: bool = True) -> None:
    """Replace ``path`` with ``data``, whole or not at all: a fresh temporary file beside it
    (``O_EXCL``), then renamed over it. A link at ``path`` is refused, not replaced."""
    path = os.path.abspath(path)
    name = os.path.basename(path)
    with folder_fd(os.path.dirname(path), within) as dfd:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                raise refused(path)
        temp = f".{name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dfd)
            raise
