"""Engine-side checkpoint storage: Orbax saves that all JAX processes make together."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

_ITEM = "default"  # the sub-directory a single-item CheckpointManager writes
_USER_RECORD = "user_checkpoint.json"  # the last directory checkpoint the user reported


def _checkpointer() -> ocp.Checkpointer:
    return ocp.Checkpointer(ocp.StandardCheckpointHandler())


def _abstract(target: Any) -> Any:
    """Replace each jax.Array leaf by a ShapeDtypeStruct that keeps its sharding."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        return x

    return jax.tree.map(leaf, target)


def _restore_numpy(item_dir: str) -> Any:
    """Restore as saved, every array as NumPy (works whatever the current devices)."""
    handler = ocp.PyTreeCheckpointHandler()
    tree = handler.metadata(pathlib.Path(item_dir)).tree

    def leaf(m: Any) -> ocp.RestoreArgs:
        if isinstance(m, ocp.metadata.ArrayMetadata):
            return ocp.RestoreArgs(restore_type=np.ndarray)
        return ocp.RestoreArgs()

    args = ocp.args.PyTreeRestore(restore_args=jax.tree.map(leaf, tree))
    return ocp.Checkpointer(handler).restore(item_dir, args=args)


def _restore(item_dir: str, target: Any) -> Any:
    """Restore `item_dir` like `target`, or as saved (NumPy if the saved layout is gone)."""
    if target is not None:
        return _checkpointer().restore(item_dir, args=ocp.args.StandardRestore(_abstract(target)))
    try:
        return _checkpointer().restore(item_dir, args=ocp.args.StandardRestore())
    except ValueError:  # saved shardings name devices this cluster does not have
        return _restore_numpy(item_dir)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One saved step: `restore(target=None)` gives back its pytree."""

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
        """The saved pytree, laid out like `target`'s shardings when given.

        `target` is a pytree of jax.Arrays or of `jax.ShapeDtypeStruct` with a
        sharding; with several processes, each one reads only its own shards.
        """
        if not self.user_managed:
            return _restore(os.path.join(self.path, _ITEM), target)
        item = os.path.join(self.path, _ITEM)
        item = item if os.path.isdir(item) else self.path
        try:
            return _restore(item, target)
        except Exception as e:
            raise RuntimeError(
                f"checkpoint {self.path} (step {self.step}) is a user-managed directory that "
                f"Orbax could not restore ({type(e).__name__}); load it yourself from "
                "checkpoint.path"
            ) from e


def checkpoint_dir(run_dir: str) -> str:
    """Where a run keeps its checkpoints."""
    return os.path.join(os.path.abspath(run_dir), "checkpoints")


def saved_steps(run_dir: str) -> list[int]:
    """Committed checkpoint steps of a run, read from disk (no JAX needed)."""
    root = checkpoint_dir(run_dir)
    if not os.path.isdir(root):
        return []
    names = os.listdir(root)  # Orbax renames `N.orbax-checkpoint-tmp-*` to `N` on commit
    return sorted(int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(root, n)))


def remember_user_checkpoint(run_dir: str, step: int, path: str) -> None:
    """Note a directory checkpoint the user reported, so ``--resume`` finds it later.

    The note sits in the run's folder, beside (not in) Orbax's ``checkpoints``.
    """
    os.makedirs(run_dir, exist_ok=True)
    record = os.path.join(run_dir, _USER_RECORD)
    with open(record + ".tmp", "w") as f:
        json.dump({"step": int(step), "path": path}, f)
    os.replace(record + ".tmp", record)


def _user_checkpoint(run_dir: str) -> Checkpoint | None:
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
    user = _user_checkpoint(run_dir)
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
        f"checkpoints (steps {shown}); pass --resume to continue it, or --name NEW / "
        "delete the folder to start over"
    )


class CheckpointStore:
    """A run's checkpoints under `run_dir/checkpoints`, keeping the last `keep`.

    Every method that writes (and the constructor) is collective: all JAX
    processes call it together, with the same arguments.
    """

    def __init__(self, run_dir: str, keep: int = 3) -> None:
        self.directory = checkpoint_dir(run_dir)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=ocp.StandardCheckpointHandler()
        )

    def _checkpoint(self, step: int) -> Checkpoint:
        return Checkpoint(step, os.path.join(self.directory, str(step)))

    def save(self, step: int, pytree: Any) -> Checkpoint:
        """Save `pytree` (global jax.Arrays, NumPy or Python scalars) as `step`; blocks."""
        latest = self._manager.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(
                f"checkpoint step {step} is not after the latest saved step {latest} "
                f"in {self.directory}"
            )
        saved = self._manager.save(step, args=ocp.args.StandardSave(pytree))
        self._manager.wait_until_finished()
        if not saved:
            raise RuntimeError(f"Orbax declined to save step {step} in {self.directory}")
        return self._checkpoint(step)

    def steps(self) -> list[int]:
        """Steps still kept, oldest first."""
        return sorted(self._manager.all_steps())

    def latest(self) -> Checkpoint | None:
        """The newest kept checkpoint, or None."""
        step = self._manager.latest_step()
        return None if step is None else self._checkpoint(step)

    def close(self) -> None:
        """Finish pending work and release Orbax's threads."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
