"""The JSON records of a named cluster (0600, replaced whole, never followed through a link):
what a kernel needs to attach, and what the supervisor says of itself. JSON only: nothing read
back can run code (no pickle)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

import psutil


def write(path: str, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` at once: a reader sees the old record or the new, whole."""
    folder, base = os.path.split(path)
    temp = os.path.join(folder, f".{base}.{os.getpid()}.{time.monotonic_ns()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def read(path: str) -> dict[str, Any] | None:
    """The record at ``path``, or ``None`` when there is none (or it is not a plain JSON object)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def update(path: str, **fields: Any) -> None:
    """Change ``fields`` of the record at ``path``, leaving the rest; nothing when it is gone."""
    doc = read(path)
    if doc is not None:
        write(path, dict(doc, **fields))


def remove(*paths: str) -> None:
    """Delete ``paths``, ignoring those already gone."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def me() -> dict[str, Any]:
    """This process as a record holds it: its pid and start time (a reused pid is not it)."""
    return process_entry(os.getpid())


def process_entry(pid: int) -> dict[str, Any]:
    """``{"pid": pid, "created": its start time}`` (``created`` 0 when it is gone)."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = 0.0
    return {"pid": int(pid), "created": created}


def process_of(entry: Any) -> psutil.Process | None:
    """The running process a record's entry names, or ``None`` (gone, a zombie, or its pid
    now someone else's)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("pid"), int):
        return None
    try:
        proc = psutil.Process(entry["pid"])
        if abs(proc.create_time() - float(entry.get("created", 0))) > 0.01:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.Error, TypeError, ValueError):
        return None
    return proc


def alive(entry: Any) -> bool:
    """Whether the process a record's entry names still runs."""
    return process_of(entry) is not None


def end_listed(doc: dict[str, Any], wait: float = 5.0) -> None:
    """SIGKILL every process ``doc["pids"]`` names (a process group leader: its whole group, as
    the controller and its schedulers), wait up to ``wait`` s, and remove ``doc["files"]``."""
    import shutil
    import signal

    victims = [p for p in map(process_of, doc.get("pids", [])) if p is not None]
    for proc in victims:
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == proc.pid and proc.pid != os.getpid():
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=wait)
    for path in doc.get("files", []):
        if isinstance(path, str) and os.path.isabs(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                remove(path)
