"""Engine-side checkpoint storage: Orbax saves that all JAX processes make together.

A step's folder holds two Orbax items: ``default`` (the arrays: global arrays as
they are, host-local values that are the same on every process once, and one
``per_process`` byte array with each process's own values in its own row) and
``jaxnb`` (a JSON manifest: the pytree structure and how to give each leaf back), and in a
run with datasets a third, ``positions`` (JSON: every process's data positions at this step),
so that a committed step always has its positions: they commit together, in Orbax's one rename.
:mod:`.leaves` says what each leaf is; :mod:`jaxnb._engine.group.gather` lets the processes
compare fingerprints before writing.

Restored on another number of processes (``--min-processes``): global arrays are laid out
like the target's (Orbax reshards them); values equal on every process come back to every
process; a leaf that differed between the processes (an RNG key, a position) comes back to
process i as process i saved it — the saved values of processes beyond the new count are left
out, and processes beyond the saved ones get process ``i mod saved``'s (which cannot be right
for values that must differ): one line says which, on process 0.
"""

from __future__ import annotations

import base64
import os
import pathlib
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxnb._core.messages import plural
from jaxnb._core.run_folder import Checkpoint, checkpoint_dir
from jaxnb._engine.checkpoint import crash_points
from jaxnb._engine.checkpoint import leaves as leaves_
from jaxnb._engine.checkpoint import plan as plan_
from jaxnb._engine.checkpoint import restore as restore_
from jaxnb._engine.checkpoint import structure as structure_
from jaxnb._engine.checkpoint.structure import shown
from jaxnb._engine.group.gather import Gatherer
from jaxnb._engine.run import restore_clock, timing

_ITEM = "default"  # the arrays (the name a single-item CheckpointManager used)
_MANIFEST = "jaxnb"  # the JSON manifest beside them
_PER_PROCESS = "per_process"
_POSITIONS = "positions"  # every process's data positions at this step
_FORMAT = "jaxnb-checkpoint/2"
#: The first format kept the structure as a pickle, which is never read (a target is needed).
_PICKLED_STRUCTURE = "jaxnb-checkpoint/1"


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


def _per_process_sharding(n: int) -> jax.sharding.NamedSharding:
    """Row q of a (processes, width) array on process q's first device."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    firsts = [min(jax.local_devices(process_index=q), key=lambda d: d.id) for q in range(n)]
    return NamedSharding(Mesh(np.array(firsts), ("process",)), PartitionSpec("process"))


def _saved_sharding(meta: Any) -> Any:
    """The sharding Orbax recorded for an array, or None when this cluster lacks its devices."""
    try:
        return meta.sharding.to_jax_sharding()
    except Exception:
        return None


def _restore_jaxnb(path: str, target: Any) -> Any:
    """Restore a checkpoint written by :class:`CheckpointStore` (see the module docstring)."""
    manifest = ocp.JsonCheckpointHandler().restore(pathlib.Path(path, _MANIFEST))
    written = manifest.get("format") if isinstance(manifest, dict) else None
    if written not in (_FORMAT, _PICKLED_STRUCTURE):
        raise ValueError(f"checkpoint {path} was written by another jaxnb version "
                         f"({str(written)[:40]}); restore it with that version")
    paths, records = manifest["paths"], manifest["records"]
    plan = plan_.Plan(**manifest["plan"])
    saved_n, me = int(manifest["num_processes"]), jax.process_index()
    targets: list[Any] = [None] * len(paths)
    if target is not None:
        tpaths, targets, treedef = structure_.flatten(target)
        if tpaths != paths:
            diff = next((f"{a} vs {b}" for a, b in zip(paths, tpaths, strict=False) if a != b),
                        f"{len(paths)} leaves vs {len(tpaths)}")
            raise ValueError(f"restore target does not match checkpoint {path} (saved vs target: "
                             f"{diff}); pass a target with the saved structure, or none")
    elif written == _PICKLED_STRUCTURE:
        raise structure_.StructureError(
            f"checkpoint {path} keeps its structure as a pickle (an earlier jaxnb), which is never "
            f"read; {structure_.WITH_TARGET}")
    restored = _restore_arrays(os.path.join(path, _ITEM), records, targets, saved_n)
    own_records = None
    values: dict[int, bytes] = {}
    if plan.width:
        source = me % saved_n  # process i keeps leaf i (see the module's docstring)
        blob = restored[_PER_PROCESS]
        row = np.asarray(blob.addressable_shards[0].data)[0] if isinstance(blob, jax.Array) \
            else np.asarray(blob)[source]
        own_records, values = plan_.unpack(plan, source, row.tobytes())
        if me == 0 and jax.process_count() != saved_n:
            print(per_process_note(path, [paths[i] for i in plan.per_process], saved_n,
                                   jax.process_count()), file=sys.stderr)
    mine = own_records or records
    out = []
    for i, target_leaf in enumerate(targets):
        record = mine[i]
        if i in values:
            value = restore_.from_bytes(record, values[i])
        elif record["kind"] == leaves_.VALUE:
            value = leaves_.decode_value(manifest["values"][str(i)])
        elif record.get("inline"):
            value = restore_.from_bytes(record, base64.b64decode(manifest["values"][str(i)]))
        else:
            value = restored[f"leaf_{i}"]
        out.append(restore_.as_saved(record, value) if target is None
                   else restore_.like(record, value, target_leaf))
    if target is not None:
        return structure_.unflatten(treedef, out)
    try:
        return structure_.rebuild(manifest["structure"], out)
    except structure_.StructureError as exc:
        raise structure_.StructureError(f"checkpoint {path}: {exc}; {structure_.WITH_TARGET}") from None


def per_process_note(path: str, names: list[str], saved_n: int, n: int) -> str:
    """One line: what became of the per-process leaves ``names`` saved by ``saved_n`` processes
    and restored on ``n`` (see :data:`PER_PROCESS_RULE`)."""
    step, leaves = os.path.basename(path.rstrip(os.sep)), ", ".join(shown(p) for p in names)
    head = f"jaxnb: checkpoint step {step} was saved by {plural(saved_n, 'process', 'processes')}"
    if n < saved_n:
        gone = f"process {saved_n - 1}" if saved_n - n == 1 else f"processes {n}–{saved_n - 1}"
        return (f"{head} and restored on {n}: each process keeps its own per-process leaves "
                f"({leaves}); {gone}'s are left out")
    new = f"process {saved_n}" if n - saved_n == 1 else f"processes {saved_n}–{n - 1}"
    whose = "its" if n - saved_n == 1 else "their"
    return (f"{head} and restored on {n}: {new} had no per-process leaves of {whose} own ({leaves}) "
            f"and got those of process i mod {saved_n}; derive them from jax.process_index() "
            "after the restore where they must differ")


def _restore_arrays(item_dir: str, records: list[dict[str, Any]], targets: list[Any],
                    saved_n: int) -> dict[str, Any]:
    """The ``default`` item: global arrays laid out like their target (or as saved), the rest NumPy."""
    if not os.path.isdir(item_dir):
        return {}
    handler = ocp.PyTreeCheckpointHandler()
    metadata = handler.metadata(pathlib.Path(item_dir)).tree
    numpy = ocp.RestoreArgs(restore_type=np.ndarray)
    args: dict[str, Any] = {}
    for name, meta in metadata.items():
        if name == _PER_PROCESS:
            args[name] = (ocp.ArrayRestoreArgs(sharding=_per_process_sharding(saved_n))
                          if jax.process_count() == saved_n else numpy)
            continue
        i = int(name.removeprefix("leaf_"))
        if records[i]["kind"] != leaves_.GLOBAL:
            args[name] = numpy
            continue
        t = targets[i]
        if isinstance(t, jax.Array) and not t.committed:
            args[name] = numpy  # given back uncommitted, as the target is
            continue
        sharding = getattr(t, "sharding", None) if t is not None else _saved_sharding(meta)
        if "key_impl" in records[i] and t is not None:
            sharding = None  # the target's sharding is for the keys, not for their data
        args[name] = ocp.ArrayRestoreArgs(sharding=sharding) if sharding is not None else numpy
    return ocp.Checkpointer(handler).restore(item_dir, args=ocp.args.PyTreeRestore(restore_args=args))


def _restore(item_dir: str, target: Any) -> Any:
    """Restore `item_dir` like `target`, or as saved (NumPy if the saved layout is gone)."""
    if target is not None:
        return _checkpointer().restore(item_dir, args=ocp.args.StandardRestore(_abstract(target)))
    try:
        return _checkpointer().restore(item_dir, args=ocp.args.StandardRestore())
    except ValueError:  # saved shardings name devices this cluster does not have
        return _restore_numpy(item_dir)


def restore(checkpoint: Checkpoint, target: Any = None) -> Any:
    """``Checkpoint.restore``: the saved pytree, as saved or laid out like `target`.

    As saved: each process gets the same kinds of values back (NumPy, Python
    values, host-local arrays on the same local devices, global arrays with
    their shardings when this cluster has those devices, else NumPy), and
    its own value of any leaf that differed between processes. `target` is a
    pytree of the same structure whose leaves are jax.Arrays,
    `jax.ShapeDtypeStruct`s (with a sharding or not), NumPy or Python values;
    with several processes, each one reads only its own shards.
    """
    with restore_clock.timed(), timing.counting("checkpoint"):  # checkpoint time of a run
        return _restore_any(checkpoint, target)


def _restore_any(checkpoint: Checkpoint, target: Any) -> Any:
    if os.path.isdir(os.path.join(checkpoint.path, _MANIFEST)):
        return _restore_jaxnb(checkpoint.path, target)
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


def saved_positions(path: str) -> dict[str, Any] | None:
    """The data positions saved with checkpoint ``path``: ``{"num_processes": N, "positions":
    [process 0's, …]}``, or None when the step has none (a run without datasets)."""
    item = os.path.join(path, _POSITIONS)
    if not os.path.isdir(item):
        return None
    return ocp.JsonCheckpointHandler().restore(pathlib.Path(item))


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
            item_handlers={_ITEM: ocp.StandardCheckpointHandler(),
                           _MANIFEST: ocp.JsonCheckpointHandler(),
                           _POSITIONS: self._positions},
        )
        self._gather = Gatherer(f"ckpt/{exchange_id or self.directory}",
                                jax.process_index(), jax.process_count())

    def _checkpoint(self, step: int) -> Checkpoint:
        return Checkpoint(step, os.path.join(self.directory, str(step)))

    def save(self, step: int, pytree: Any, positions: dict[str, Any] | None = None) -> Checkpoint:
        """Save `pytree` as `step`; blocks until it is on disk.

        ``positions``: this process's data positions at this step (every process passes
        them, or none does); they are saved in the step, with the other processes'.

        Leaves may be global or host-local jax.Arrays (pmap outputs too), NumPy,
        Python numbers and strings, PRNG keys, in dicts, lists, tuples,
        dataclasses, NNX ``State`` or Optax state. Host-local leaves equal on
        every process are written once; the others once per process. A leaf
        that cannot be saved raises ``LeafError`` (a ValueError) on every process.
        """
        latest = self._manager.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(
                f"checkpoint step {step} is not after the latest saved step {latest} "
                f"in {self.directory}"
            )
        arrays, manifest = self._prepare(pytree)
        items = {_MANIFEST: ocp.args.JsonSave(manifest)}
        if arrays:
            items[_ITEM] = ocp.args.StandardSave(arrays)
        if positions is not None:
            every = self._gather(positions)
            items[_POSITIONS] = _PositionsSave({"num_processes": len(every), "positions": every})
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
            sharding = _per_process_sharding(n)
            device = next(iter(sharding.addressable_devices))
            arrays[_PER_PROCESS] = jax.make_array_from_single_device_arrays(
                (n, plan.width), sharding, [jax.device_put(row, device)])
        manifest = {
            "format": _FORMAT,
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
