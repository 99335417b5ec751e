"""Giving saved leaves back: as they were saved, or laid out like a target's leaves (never a
``device_put`` to devices of another process; an uncommitted target stays uncommitted)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxnb._engine.checkpoint.leaves import (
    GLOBAL,
    LOCAL,
    NUMPY,
    VALUE,
    decode_value,
    dtype_of,
    sharding_of,
)


def from_bytes(record: dict[str, Any], raw: bytes) -> Any:
    """A per-process value as saved: NumPy for arrays, the Python value for values."""
    if record["kind"] == VALUE:
        return decode_value(raw)
    return np.frombuffer(raw, dtype_of(record["dtype"])).reshape(record["shape"]).copy()


def as_saved(record: dict[str, Any], value: Any) -> Any:
    """``value`` (NumPy, a restored global array or a Python value) as the kind that was saved."""
    kind = record["kind"]
    if kind in (LOCAL, GLOBAL) and record.get("committed") is False:
        value = jax.device_put(np.asarray(value).reshape(record["shape"]))
    elif kind == LOCAL:
        value = jax.device_put(np.asarray(value).reshape(record["shape"]),
                               sharding_of(record["layout"]))
    elif kind == NUMPY:
        value = np.asarray(value).reshape(record["shape"])  # Orbax gives 0-d arrays back as 1-d
        return value[()] if record.get("scalar") else value
    if "key_impl" in record:
        value = jax.random.wrap_key_data(value, impl=record["key_impl"])
    return value


def like(record: dict[str, Any], value: Any, target: Any) -> Any:
    """``value`` laid out like ``target`` (a jax.Array, ShapeDtypeStruct, NumPy or Python value)."""
    if record["kind"] == VALUE or not hasattr(target, "dtype"):
        if isinstance(target, bool | int | float | complex) and not isinstance(value, str | bytes):
            return type(target)(np.asarray(value).item())
        return as_saved(record, value)
    if isinstance(target, np.ndarray | np.generic):
        out = np.asarray(value).reshape(np.shape(target)).astype(target.dtype, copy=False)
        return out[()] if isinstance(target, np.generic) else out
    key = jax.dtypes.issubdtype(target.dtype, jax.dtypes.prng_key)
    if key and "key_impl" not in record:
        raise ValueError(
            f"checkpoint leaf is not a PRNG key but its target is {target.dtype}; pass a target "
            "leaf of the saved kind, or call restore() without a target"
        )
    sharding = getattr(target, "sharding", None)
    if isinstance(target, jax.Array) and not target.committed:
        sharding = None  # the target was never committed to a device: neither is its value
    if isinstance(value, jax.Array) and not key and value.dtype == target.dtype and (
            value.sharding == sharding or (sharding is None and not value.committed)):
        return value
    if key:
        return _keys(np.asarray(value), record["key_impl"], sharding)
    host = np.asarray(value).reshape(target.shape).astype(target.dtype, copy=False)
    return _place(host, sharding)


def _place(host: np.ndarray, sharding: Any) -> jax.Array:
    """``host`` as a jax.Array with ``sharding`` (uncommitted when None); never a
    ``device_put`` to devices of other processes: each process places its own shards."""
    if sharding is None:
        return jax.device_put(host)
    if sharding.is_fully_addressable:
        return jax.device_put(host, sharding)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _keys(data: np.ndarray, impl: str, sharding: Any) -> jax.Array:
    """PRNG keys from their key data, laid out with the keys' ``sharding``."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if sharding is None or sharding.is_fully_addressable:
        keys = jax.random.wrap_key_data(_place(data, None), impl=impl)
        return keys if sharding is None else jax.device_put(keys, sharding)
    if isinstance(sharding, NamedSharding):  # the key data's extra last axis is not split
        data_sharding = NamedSharding(sharding.mesh, sharding.spec)
    else:
        devices = np.array(sorted(sharding.device_set, key=lambda d: d.id))
        data_sharding = NamedSharding(Mesh(devices, ("jaxnb_devices",)), PartitionSpec())
    wrap = jax.jit(lambda d: jax.random.wrap_key_data(d, impl=impl), out_shardings=sharding)
    return wrap(_place(data, data_sharding))
