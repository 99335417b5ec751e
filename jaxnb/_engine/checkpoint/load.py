"""Reading back what :class:`~jaxnb._engine.checkpoint.store.CheckpointStore` wrote (and
user-managed Orbax folders): ``Checkpoint.restore`` and the data positions of a step.

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
from jaxnb._core.run_folder import Checkpoint
from jaxnb._engine.checkpoint import leaves as leaves_
from jaxnb._engine.checkpoint import plan as plan_
from jaxnb._engine.checkpoint import restore as restore_
from jaxnb._engine.checkpoint import structure as structure_
from jaxnb._engine.checkpoint.structure import shown
from jaxnb._engine.run import restore_clock, timing

ITEM = "default"  # the arrays (the name a single-item CheckpointManager used)
MANIFEST = "jaxnb"  # the JSON manifest beside them
PER_PROCESS = "per_process"
POSITIONS = "positions"  # every process's data positions at this step
FORMAT = "jaxnb-checkpoint/2"
#: The first format kept the structure as a pickle, which is never read (a target is needed).
PICKLED_STRUCTURE = "jaxnb-checkpoint/1"


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


def per_process_sharding(n: int) -> jax.sharding.NamedSharding:
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
    manifest = ocp.JsonCheckpointHandler().restore(pathlib.Path(path, MANIFEST))
    written = manifest.get("format") if isinstance(manifest, dict) else None
    if written not in (FORMAT, PICKLED_STRUCTURE):
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
    elif written == PICKLED_STRUCTURE:
        raise structure_.StructureError(
            f"checkpoint {path} keeps its structure as a pickle (an earlier jaxnb), which is never "
            f"read; {structure_.WITH_TARGET}")
    restored = _restore_arrays(os.path.join(path, ITEM), records, targets, saved_n)
    own_records = None
    values: dict[int, bytes] = {}
    if plan.width:
        source = me % saved_n  # process i keeps leaf i (see the module's docstring)
        blob = restored[PER_PROCESS]
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
        if name == PER_PROCESS:
            args[name] = (ocp.ArrayRestoreArgs(sharding=per_process_sharding(saved_n))
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
    if os.path.isdir(os.path.join(checkpoint.path, MANIFEST)):
        return _restore_jaxnb(checkpoint.path, target)
    if not checkpoint.user_managed:
        return _restore(os.path.join(checkpoint.path, ITEM), target)
    item = os.path.join(checkpoint.path, ITEM)
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
    item = os.path.join(path, POSITIONS)
    if not os.path.isdir(item):
        return None
    return ocp.JsonCheckpointHandler().restore(pathlib.Path(item))
