"""What a value on an engine is, in a few words: type, shape, dtype, sharding, bytes (engine side).

Read from metadata only (``shape``, ``dtype``, ``sharding``, ``nbytes``): no array data is
read, copied or gathered, so describing a value never waits on a device or on the other
processes. ``%jax_who`` lists the user's variables with it, the debugger prints JAX values
with it (:func:`array_text`), and ``%jax_mesh``'s pytree table takes its sharding words
(:func:`sharding_text`).
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

#: Python values whose size is their own (``sys.getsizeof``), not that of what they hold.
SCALARS = (bool, int, float, complex, str, bytes)


def sharding_text(sharding: Any) -> str:
    """``P('data', None)`` for a named sharding, ``cpu:0`` for one device, else its kind."""
    if isinstance(sharding, NamedSharding):
        return str(sharding.spec).replace("PartitionSpec", "P")
    devices = list(sharding.device_set)
    if len(devices) == 1:
        return f"{devices[0].platform}:{devices[0].id}"
    if sharding.is_fully_replicated:
        return "replicated"
    return type(sharding).__name__


def array_text(x: Any) -> str:
    """A JAX array as the debugger prints it, without its data:
    ``Array(shape=(8, 4), dtype=float32, sharding=P('data', None))``."""
    if isinstance(x, jax.core.Tracer):
        return repr(x)  # a traced value has no data to pull: its repr is its abstract value
    if x.is_deleted():
        return f"Array(shape={tuple(x.shape)}, dtype={x.dtype}, deleted)"
    spans = "" if x.is_fully_addressable else f", {len(x.sharding.device_set)} devices over processes"
    return f"Array(shape={tuple(x.shape)}, dtype={x.dtype}, sharding={sharding_text(x.sharding)}{spans})"


def describe_value(value: Any) -> dict[str, Any]:
    """``{"type", "shape", "dtype", "sharding", "bytes"}`` of ``value`` (``None`` where it
    does not apply); a pytree of arrays counts its leaves and sums their bytes."""
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        return _row("Array", tuple(value.shape), str(value.dtype),
                    "deleted" if value.is_deleted() else sharding_text(value.sharding),
                    math.prod(value.shape) * value.dtype.itemsize)
    if isinstance(value, np.ndarray | np.generic):
        return _row(type(value).__name__, tuple(np.shape(value)), str(value.dtype), "host (NumPy)",
                    int(value.nbytes))
    if isinstance(value, jax.sharding.Mesh):
        sizes = ", ".join(f"{a}={s}" for a, s in value.shape.items())
        return _row("Mesh", None, None, sizes, None)
    if isinstance(value, SCALARS) or value is None:
        return _row(type(value).__name__, None, None, None, sys.getsizeof(value))
    if isinstance(value, types.ModuleType | types.FunctionType | type):
        return _row(type(value).__name__, None, None, None, None)
    return _tree(value)


def _tree(value: Any) -> dict[str, Any]:
    """A container: its arrays' dtypes and shardings when they agree, their bytes summed."""
    try:
        leaves = jax.tree_util.tree_leaves(value)
    except Exception:  # a container JAX cannot walk
        leaves = [value]
    if len(leaves) == 1 and leaves[0] is value:
        return _row(type(value).__name__, None, None, None, None)
    rows = [describe_value(leaf) for leaf in leaves]
    arrays = [r for r in rows if r["shape"] is not None]
    dtypes = {r["dtype"] for r in arrays}
    shardings = {r["sharding"] for r in arrays}
    sizes = [r["bytes"] for r in rows if r["bytes"] is not None]
    leaves_text = f"{len(leaves)} leaves" if len(leaves) != 1 else "1 leaf"
    return {
        "type": f"{type(value).__name__} ({leaves_text})",
        "shape": None,
        "dtype": dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else None),
        "sharding": shardings.pop() if len(shardings) == 1 else ("mixed" if shardings else None),
        "bytes": sum(sizes) if sizes else None,
    }


def _row(kind: str, shape: tuple[int, ...] | None, dtype: str | None, sharding: str | None,
         nbytes: int | None) -> dict[str, Any]:
    return {"type": kind, "shape": None if shape is None else [int(n) for n in shape],
            "dtype": dtype, "sharding": sharding, "bytes": nbytes}
