"""Engine-side checkpoint storage: Orbax saves that all JAX processes make together.

A step's folder holds two Orbax items: ``default`` (the arrays: global arrays as
they are, host-local values that are the same on every process once, and one
``per_process`` byte array with each process's own values in its own row) and
``jaxnb`` (a JSON manifest: the pytree structure, how to give each leaf back, and process 0's
report of the step), and in a
run with datasets a third, ``positions`` (JSON: every process's data positions at this step),
so that a committed step always has its positions: they commit together, in Orbax's one rename.
:mod:`.leaves` says what each leaf is; :mod:`jaxnb._engine.group.gather` lets the processes
compare fingerprints before writing.

Reading them back (``Checkpoint.restore``, and a step's positions) is :mod:`.load`'s.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxnb._core.run_folder import Checkpoint, checkpoint_dir
from jaxnb._engine.checkpoint import crash_points
from jaxnb._engine.checkpoint import leaves as leaves_
from jaxnb._engine.checkpoint import plan as plan_
from jaxnb._engine.checkpoint import structure as structure_
from jaxnb._engine.checkpoint.load import FORMAT, ITEM, MANIFEST, PER_PROCESS, POSITIONS, per_process_sharding
from jaxnb._engine.group.gather import Gatherer


class _PositionsHandler(ocp.JsonCheckpointHandler):
    """The ``positions`` item's handler; process 0 finalizes it once every process has written
    its part of the step, just before the commit (a crash point for tests)."""

    step = -1

    def finalize(self, directory: Any) -> None:
        crash_points.reached("writing", self.step)
        super().finalize(directory)


@ocp.args.register_with_handler(_PositionsHandler, for_save=True)
class _PositionsSave(ocp.args.JsonSave):
    """Orbax finds an item's handler by the type of its arguments (to save and to restore)."""


@ocp.args.register_with_handler(_PositionsHandler, for_restore=True)
class _PositionsRestore(ocp.args.JsonRestore):
    pass


class CheckpointStore:
    """A run's checkpoints under `run_dir/checkpoints`, keeping the last `keep`.

    Every method that writes (and the constructor) is collective: all JAX
    processes call it together, with the same arguments. `exchange_id` names
    this run's fingerprint exchanges; it must differ from other runs' on the
    same ``jax.distributed`` cluster (default: the directory).
    """

    def __init__(self, run_dir: str, keep: int = 3, exchange_id: str | None = None) -> None:
        self.directory = checkpoint_dir(run_dir, made=True)  # no link planted in its place
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False)
        self._positions = _PositionsHandler()
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=options,
            item_handlers={ITEM: ocp.StandardCheckpointHandler(),
                           MANIFEST: ocp.JsonCheckpointHandler(),
                           POSITIONS: self._positions},
        )
        self._gather = Gatherer(f"ckpt/{exchange_id or self.directory}",
                                jax.process_index(), jax.process_count())

    def _checkpoint(self, step: int) -> Checkpoint:
        return Checkpoint(step, os.path.join(self.directory, str(step)))

    def save(self, step: int, pytree: Any, positions: dict[str, Any] | None = None,
             report: dict[str, Any] | None = None) -> Checkpoint:
        """Save `pytree` as `step`; blocks until it is on disk.

        ``positions``: this process's data positions at this step (every process passes
        them, or none does); they are saved in the step, with the other processes'.

        Leaves may be global or host-local jax.Arrays (pmap outputs too), NumPy,
        Python numbers and strings, PRNG keys, in dicts, lists, tuples,
        dataclasses, NNX ``State`` or Optax state. Host-local leaves equal on
        every process are written once; the others once per process. A leaf
        that cannot be saved raises ``LeafError`` (a ValueError) on every process.

        ``report``: process 0's report of this step (JSON), kept in the manifest
        (:func:`jaxnb._core.run_folder.saved_report`).
        """
        latest = self._manager.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(
                f"checkpoint step {step} is not after the latest saved step {latest} "
                f"in {self.directory}"
            )
        arrays, manifest = self._prepare(pytree)
        if report is not None:
            manifest["report"] = report
        items = {MANIFEST: ocp.args.JsonSave(manifest)}
        if arrays:
            items[ITEM] = ocp.args.StandardSave(arrays)
        if positions is not None:
            every = self._gather(positions)
            items[POSITIONS] = _PositionsSave({"num_processes": len(every), "positions": every})
            self._positions.step = step
        try:
            saved = self._manager.save(step, args=ocp.args.Composite(**items))
            self._manager.wait_until_finished()
        except Exception as exc:
            reason = (str(exc).strip().splitlines() or [""])[0]
            raise RuntimeError(f"Orbax could not save checkpoint step {step} in {self.directory} "
                               f"({type(exc).__name__}: {reason})") from exc
        finally:
            self._gather.forget()  # every process is past Orbax's start barrier
        if not saved:
            raise RuntimeError(f"Orbax declined to save step {step} in {self.directory}")
        return self._checkpoint(step)

    def _prepare(self, pytree: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Agree with the other processes on what is written once; the arrays and the manifest."""
        n, me = jax.process_count(), jax.process_index()
        paths: list[str] = []
        leaves: list[leaves_.Leaf] = []
        described, failure, error = None, None, None
        try:
            paths, xs, _ = structure_.flatten(pytree)
            leaves = [leaves_.prepare(p, x, n) for p, x in zip(paths, xs, strict=True)]
            if me == 0:
                described = structure_.describe(pytree)
        except Exception as exc:  # told to the others first, so that none waits for us
            failure, error = exc, f"{type(exc).__name__}: {exc}"
        summaries = self._gather(plan_.summary(leaves, paths, error))
        if failure is not None:
            raise failure
        plan = plan_.plan(summaries, me)
        arrays: dict[str, Any] = {}
        values: dict[str, str] = {}
        for i, leaf in enumerate(leaves):
            if not plan.shared[i]:
                continue
            if leaf.kind == leaves_.VALUE:
                values[str(i)] = leaf.data.decode()
            elif leaf.record.get("inline"):
                values[str(i)] = base64.b64encode(leaf.raw()).decode()
            elif leaf.kind == leaves_.LOCAL and not any(plan.records_len):
                # laid out alike everywhere: written once by Orbax from device, as a global array
                arrays[f"leaf_{i}"] = leaves_.across_processes(leaf.array, leaf.record["layout"], n)
            else:
                arrays[f"leaf_{i}"] = leaf.data
        if plan.width:
            row = np.zeros((1, plan.width), np.uint8)
            own = plan_.pack(plan, me, leaves)
            row[0, : len(own)] = np.frombuffer(own, np.uint8)
            sharding = per_process_sharding(n)
            device = next(iter(sharding.addressable_devices))
            arrays[PER_PROCESS] = jax.make_array_from_single_device_arrays(
                (n, plan.width), sharding, [jax.device_put(row, device)])
        manifest = {
            "format": FORMAT,
            "num_processes": n,
            "structure": described,
            "paths": paths,
            "records": [leaf.record for leaf in leaves],
            "values": values,
            "plan": plan.to_json(),
        }
        return arrays, manifest

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
