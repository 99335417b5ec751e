"""Engine-side checkpoint storage: Orbax saves that all JAX processes make together."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxnb._run_folder import Checkpoint, checkpoint_dir

_ITEM = "default"  # the sub-directory a single-item CheckpointManager writes


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


def restore(checkpoint: Checkpoint, target: Any = None) -> Any:
    """``Checkpoint.restore``: the saved pytree, laid out like `target`'s shardings when given."""
    if not checkpoint.user_managed:
        return _restore(os.path.join(checkpoint.path, _ITEM), target)
    item = os.path.join(checkpoint.path, _ITEM)
    item = item if os.path.isdir(item) else checkpoint.path
    try:
        return _restore(item, target)
    except Exception as e:
        raise RuntimeError(
            f"checkpoint {checkpoint.path} (step {checkpoint.step}) is a user-managed directory "
            f"that Orbax could not restore ({type(e).__name__}); load it yourself from "
            "checkpoint.path"
        ) from e


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
