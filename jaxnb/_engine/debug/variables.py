"""The user's variables on this process, and what compares them across processes (engine side).

``%jax_who`` asks every process for :func:`who`: each variable described
(:func:`jaxnb._engine.layout.value.describe_value`) with the fingerprint of every *piece* it
holds for itself — a host value (NumPy, a local ``jax.Array``, a number), or one block of a
global array. The fingerprints are the checkpoints' own 96-bit ones
(:func:`jaxnb._engine.checkpoint.plan.fingerprints`): the notebook compares them, and no data
moves between processes or to the notebook. ``%jax_diff NAME`` asks for :func:`pieces` of one
pytree, then, for the pieces that differ and agree in shape, :func:`differences`: the largest
difference from the lowest process holding the piece, every process taking part (the
pieces travel between the processes in bounded chunks, through a JAX all-gather).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import jax
import numpy as np

from jaxnb._engine.checkpoint.leaves import LeafError, prepare
from jaxnb._engine.checkpoint.plan import fingerprints
from jaxnb._engine.layout.describe import block_of
from jaxnb._engine.layout.value import describe_value
from jaxnb._engine.run.values import lookup, user_namespace

#: IPython's own names in a user namespace.
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
#: Bytes of one piece each process sends per all-gather while measuring a difference.
CHUNK_BYTES = 16 << 20
#: A number or string leaf shows its value (this long at most) where it differs.
VALUE_WIDTH = 60


def user_variables() -> dict[str, Any]:
    """The names a user defined on this engine: not modules, nor classes and functions
    imported from them, nor IPython's own or hidden names."""
    try:
        from IPython import get_ipython

        hidden = getattr(get_ipython(), "user_ns_hidden", {}) or {}
    except ImportError:
        hidden = {}
    return {name: value for name, value in user_namespace().items()
            if not name.startswith("_") and name not in IPYTHON_NAMES
            and not (name in hidden and hidden[name] is value) and not _imported(value)}


def _imported(value: Any) -> bool:
    """A module, or a class or function that a module defines (``from jax import jit``)."""
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
        return getattr(value, "__module__", "__main__") != "__main__"
    return False


def who() -> list[dict[str, Any]]:
    """Every user variable: its description and ``pieces`` (piece key -> fingerprint)."""
    rows = []
    for name, value in sorted(user_variables().items()):
        found = _pieces(value)
        rows.append({"name": name, **describe_value(value),
                     "pieces": {key: piece["fp"] for key, piece in found.items()}})
    return rows


def pieces(name: str) -> dict[str, dict[str, Any]]:
    """The pieces of the pytree ``name`` (or an expression): leaf path, block, fingerprint,
    shape, dtype and, for a number or a string, its value."""
    return _pieces(lookup(name))


def differences(name: str, wanted: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Every process, together: for each wanted piece (``key``, ``shape``, ``dtype``), the
    largest absolute difference of each process's piece from the lowest process holding it
    (``None`` where a process does not hold it). The same list on every process."""
    from jax.experimental import multihost_utils

    held = {key: data for key, data in _host_pieces(lookup(name))}
    found: dict[str, list[float | None]] = {}
    for want in wanted:
        dtype, shape = np.dtype(want["dtype"]), tuple(want["shape"])
        mine = held.get(want["key"])
        have = mine is not None and mine.shape == shape and mine.dtype == dtype
        raw = np.ascontiguousarray(mine if have else np.zeros(shape, dtype)).reshape(-1).view(np.uint8)
        present = np.asarray(multihost_utils.process_allgather(np.array([have]))).reshape(-1)
        reference = int(np.argmax(present))
        largest = np.zeros(len(present))
        step = max(CHUNK_BYTES // dtype.itemsize, 1) * dtype.itemsize
        wide = np.complex128 if dtype.kind == "c" else np.float64  # no overflow, no wrap-around
        for start in range(0, raw.size, step):
            part = np.asarray(multihost_utils.process_allgather(raw[start:start + step]))
            values = part.reshape(len(present), -1).view(dtype).astype(wide)
            apart = np.abs(values - values[reference])
            apart[np.isnan(values) & np.isnan(values[reference])] = 0.0  # NaN where both are NaN
            if apart.size:
                largest = np.fmax(largest, apart.max(axis=1))
        found[want["key"]] = [float(d) if present[q] else None for q, d in enumerate(largest)]
    return found


# ---- pieces ----------------------------------------------------------------------------


def _host_pieces(value: Any) -> list[tuple[str, Any]]:
    """(key, this process's own copy) of every piece of ``value``; ``None`` for a piece that
    cannot be read (a deleted array, a traced value)."""
    found: list[tuple[str, Any]] = []
    try:
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    except Exception:  # not a pytree JAX can walk: one opaque leaf
        leaves = [((), value)]
    for path, leaf in leaves:
        where = jax.tree_util.keystr(path)
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable and not leaf.is_deleted():
            seen = set()
            for shard in leaf.addressable_shards:
                block = block_of(shard.index, leaf.shape)
                if block not in seen:
                    seen.add(block)
                    text = "[" + ", ".join(f"{a}:{b}" for a, b in block) + "]"
                    found.append((f"{where}@{text}", _host(shard.data)))
        else:
            found.append((where, _host(leaf) if isinstance(leaf, jax.Array) else leaf))
    return found


def _pieces(value: Any) -> dict[str, dict[str, Any]]:
    found, leaves = {}, {}
    for key, data in _host_pieces(value):
        path, _, block = key.partition("@")
        piece: dict[str, Any] = {"path": path or "(root)", "block": block or None, "fp": None,
                                 "shape": None, "dtype": None, "value": None}
        if isinstance(data, np.ndarray):
            piece.update(shape=list(data.shape), dtype=data.dtype.str)
        elif isinstance(data, bool | int | float | complex | str | bytes):
            piece["value"] = repr(data)[:VALUE_WIDTH]
            if isinstance(data, int | float) and not isinstance(data, bool):
                piece["number"] = float(data)
        # Not a value a checkpoint holds (a function, an object): no fingerprint, not compared.
        with contextlib.suppress(LeafError, TypeError, ValueError):
            if data is not None:
                leaves[key] = prepare(key, data, 1)  # this process's own copy: never a global leaf
        found[key] = piece
    for key, fp in zip(leaves, fingerprints(list(leaves.values())), strict=True):
        found[key]["fp"] = fp  # big pieces on several threads, as a checkpoint's
    return found


def _host(x: jax.Array) -> np.ndarray | None:
    """This process's copy of an array it holds (PRNG keys as their key data)."""
    if isinstance(x, jax.core.Tracer) or x.is_deleted():
        return None
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)
