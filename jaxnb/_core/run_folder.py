"""A training run's folder: where its checkpoints are, which exist, and refusing to mix runs.

Pure file-system logic, used by the notebook (``--resume``, the refusal to
overwrite, one live run per folder) and by the engines (where to save). No JAX, no Orbax.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

from jaxnb._core import lock_break, safe_files
from jaxnb._core.contract import EngineCall
from jaxnb._core.file_lock import FileLock
from jaxnb._core.run_reports import REPORTS_FILE
from jaxnb._core.spelling import example

_USER_RECORD = "user_checkpoint.json"  # the last directory checkpoint the user reported
#: The file the notebook kernel of a live run holds locked (the OS drops the lock if it dies).
LOCK_FILE = "run.lock"
#: A jaxnb checkpoint's JSON manifest, in its step's folder (Orbax's item ``jaxnb``).
MANIFEST_FILE = ("jaxnb", "metadata")

LIVE_ELSEWHERE = ("run {name!r} in {dir} is live in another kernel ({holder}); wait for it to end "
                  "or stop it there, or pass {new} for a new run")
LIVE_HERE = ("run {name!r} in {dir} is live in this kernel (another cluster's run); wait for it "
             "to end or stop it, or pass {new} for a new run")


_RESTORE = EngineCall("jaxnb._engine.checkpoint.load:restore")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One saved step of a run (``jaxnb.Checkpoint``, as Ray's): ``step``, ``path``, and
    ``restore(target=None)`` on the engines.

    ``Result.checkpoint`` and ``jaxnb.get_checkpoint()`` are such records;
    ``user_managed`` marks a directory the user wrote and reported themselves.
    The record itself needs no JAX, so the notebook can hold it, print it and
    send it to the engines (``%jax_push``), where ``restore()`` runs.
    """

    step: int
    path: str
    user_managed: bool = False

    @classmethod
    def from_directory(cls, path: str | os.PathLike, step: int = 0) -> Checkpoint:
        """Record a directory the user wrote themselves, as Ray's ``Checkpoint.from_directory``.

        Passed to ``report(checkpoint=...)``, it takes the report's step.
        """
        return cls(int(step), os.path.abspath(os.fspath(path)), user_managed=True)

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """The checkpoint's directory, as Ray's ``Checkpoint.as_directory``."""
        yield self.path

    def restore(self, target: Any = None) -> Any:
        """The saved pytree, laid out like ``target``'s shardings when given.

        Engine code (it loads JAX and Orbax): call it in a ``%%jax_cluster`` cell or
        a train function, on every process together. ``target`` is a pytree of
        jax.Arrays or of ``jax.ShapeDtypeStruct`` with a sharding; with several
        processes, each one reads only its own shards.

        Raises:
            ValueError: without ``target``, the saved structure holds a class jaxnb does not
                rebuild without running code (one line: pass ``restore(target)``).

        Example:
            >>> state = jaxnb.get_checkpoint().restore(state)   # doctest: +SKIP
        """
        return _RESTORE(self, target)


def make(run_dir: str) -> list[str]:
    """Make a run's folder (and the folders above it that are missing); those made, deepest
    first (see :func:`remove_if_empty`)."""
    made = []
    folder = os.path.abspath(run_dir)
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(run_dir, exist_ok=True)
    return made


def release(lock: FileLock, made: list[str]) -> None:
    """End a run's hold on its folder (:func:`hold`): the folders :func:`make` made go when the
    run left nothing in them but the lock file and its reports (a refused run, a run without
    checkpoints: the kernel that releases it followed it to its end)."""
    left = set(_entries(made[0])) if made else set()
    if made and lock.held and LOCK_FILE in left and left <= {LOCK_FILE, REPORTS_FILE}:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(made[0], REPORTS_FILE))
        with contextlib.suppress(OSError):
            os.unlink(lock.path)  # still held: no other run can have started in the folder
    lock.release()
    remove_if_empty(made)


def _entries(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def remove_if_empty(made: list[str]) -> None:
    """Remove the folders :func:`make` made that the run left empty (a refused run, a run
    without checkpoints): nothing is left behind that holds nothing."""
    for folder in made:
        try:
            os.rmdir(folder)  # only when empty
        except OSError:
            return


def checkpoint_dir(run_dir: str, made: bool = False) -> str:
    """Where a run keeps jaxnb's own checkpoints (``made``: made now, refused when a link
    stands there: Orbax would write through it)."""
    folder = os.path.join(os.path.abspath(run_dir), "checkpoints")
    if made:
        with safe_files.folder_fd(folder, within=run_dir):
            pass
    return folder


def saved_steps(run_dir: str) -> list[int]:
    """Committed checkpoint steps of a run, read from disk."""
    root = checkpoint_dir(run_dir)
    if not os.path.isdir(root):
        return []
    names = os.listdir(root)  # Orbax renames `N.orbax-checkpoint-tmp-*` to `N` on commit
    return sorted(int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(root, n)))


def saved_report(checkpoint: Checkpoint) -> dict[str, Any] | None:
    """Process 0's report of a checkpoint's step, as saved with it (``step``, ``time``,
    ``metrics``), or ``None`` (a directory of the user's, an older jaxnb's, unreadable). JSON:
    reading it runs nothing."""
    if checkpoint.user_managed:
        return None
    try:
        with open(os.path.join(checkpoint.path, *MANIFEST_FILE), "rb") as f:
            report = json.loads(f.read()).get("report")
        if int(report["step"]) == checkpoint.step and isinstance(report["metrics"], dict):
            return {"step": checkpoint.step, "time": float(report["time"]),
                    "metrics": report["metrics"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def remember_user_checkpoint(run_dir: str, step: int, path: str) -> None:
    """Note a directory checkpoint the user reported, so ``--resume`` finds it later.

    The note sits in the run's folder, beside (not in) Orbax's ``checkpoints``.
    """
    record = json.dumps({"step": int(step), "path": path}).encode()
    safe_files.write_whole(os.path.join(run_dir, _USER_RECORD), record)


def user_checkpoint(run_dir: str) -> Checkpoint | None:
    """The last directory checkpoint the user reported in this run, if noted."""
    try:
        with open(os.path.join(run_dir, _USER_RECORD)) as f:
            record = json.load(f)
        return Checkpoint(int(record["step"]), str(record["path"]), user_managed=True)
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or not jaxnb's
        return None


def check_fresh_run(run_dir: str, resume: bool) -> Checkpoint | None:
    """Refuse to overwrite a run that has checkpoints; with `resume`, its latest one.

    The latest is the highest step among jaxnb's own saves and the last directory
    the user reported themselves.
    """
    found = [Checkpoint(s, os.path.join(checkpoint_dir(run_dir), str(s)))
             for s in saved_steps(run_dir)]
    user = user_checkpoint(run_dir)
    if user is not None:
        found.append(user)
    if not found:
        return None
    if resume:
        return max(found, key=lambda c: c.step)
    run_dir = os.path.abspath(run_dir)
    shown = ", ".join(str(s) for s in sorted({c.step for c in found}))
    raise FileExistsError(
        f"run '{os.path.basename(run_dir)}' in {os.path.dirname(run_dir)} already has "
        f"checkpoints (steps {shown}); pass {example('resume', True)} to continue it, or "
        f"{example('name', 'NEW')} / delete the folder to start over"
    )


def hold(run_dir: str) -> FileLock:
    """Lock the run folder for a live run (made if missing); ``FileExistsError`` naming the
    kernel that runs it when it is live already. ``release()`` the lock when the run ends."""
    lock = FileLock(os.path.join(run_dir, LOCK_FILE))
    holder = lock.acquire()
    if holder is None:
        return lock
    run_dir = os.path.abspath(run_dir)
    name, parent, new = os.path.basename(run_dir), os.path.dirname(run_dir), example("name", "NEW")
    if holder.is_this_process():
        raise FileExistsError(LIVE_HERE.format(name=name, dir=parent, new=new))
    stale = lock_break.stale(f"run {name!r} in {parent}", lock.path, holder)
    if stale is not None:
        raise FileExistsError(stale)
    raise FileExistsError(LIVE_ELSEWHERE.format(name=name, dir=parent, holder=holder.describe(),
                                                new=new))


def break_lock(run_dir: str) -> bool:
    """``--break-lock``: remove the run's lock when its holder is gone (see
    :mod:`jaxnb._core.lock_break`); False when no one held it."""
    return lock_break.break_lock(os.path.join(os.path.abspath(run_dir), LOCK_FILE))


def left_by_earlier_run(run_dir: str) -> bool:
    """Whether an earlier run left files in ``run_dir`` (its lock file aside)."""
    try:
        return any(entry != LOCK_FILE for entry in os.listdir(run_dir))
    except OSError:
        return False
