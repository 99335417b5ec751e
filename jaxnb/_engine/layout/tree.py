"""Describe a pytree of arrays for ``%jax_mesh params``: one row per leaf (engine side).

Each leaf: its path, shape, dtype, sharding spec and the bytes each device
holds (from the sharding's shard shape; no data is read).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from jaxnb._engine.layout.value import sharding_text


def is_tree_of_arrays(obj: Any) -> bool:
    """Whether ``obj`` is a container whose leaves include an array."""
    leaves = jax.tree_util.tree_leaves(obj)
    return not (len(leaves) == 1 and leaves[0] is obj) and any(
        isinstance(x, (jax.Array, np.ndarray)) for x in leaves
    )


def describe_tree(tree: Any) -> dict[str, Any]:
    """``{"kind": "tree", "leaves": [...], "bytes_per_device": n}`` for ``tree``."""
    rows = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        rows.append(_leaf(jax.tree_util.keystr(path), leaf))
    return {
        "kind": "tree",
        "leaves": rows,
        "bytes_per_device": sum(r["bytes_per_device"] or 0 for r in rows),
    }


def _leaf(path: str, leaf: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"path": path or "(root)", "shape": None, "dtype": type(leaf).__name__,
                           "spec": "—", "bytes_per_device": None}
    if isinstance(leaf, jax.Array):
        shape = tuple(int(n) for n in leaf.shape)
        sharding = leaf.sharding
        shard = sharding.shard_shape(shape)
        row.update(shape=list(shape), dtype=str(leaf.dtype),
                   bytes_per_device=math.prod(shard) * leaf.dtype.itemsize)
        row["spec"] = sharding_text(sharding)
    elif isinstance(leaf, np.ndarray):
        row.update(shape=list(leaf.shape), dtype=str(leaf.dtype), spec="NumPy (host)",
                   bytes_per_device=None)
    return row
