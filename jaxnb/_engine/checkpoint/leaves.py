"""What each leaf of a checkpoint pytree is, how it is written, and how it comes back.

A leaf is one of four kinds:

- ``global``: a ``jax.Array`` spanning several processes (or any array in a
  one-process run); Orbax writes its shards as they are.
- ``local``: a ``jax.Array`` on this process's own devices (a plain ``jnp`` array,
  a ``pmap`` output); written from its host copy, given back on the same local
  devices with the same sharding.
- ``numpy``: a NumPy array or scalar.
- ``value``: a Python number, string or bytes (kept in the checkpoint's manifest).

Typed PRNG keys are saved as their key data and wrapped again on restore. Plain
dataclasses that JAX does not know as pytrees are walked field by field.
Everything here is pure (no collectives, no files); :mod:`.store` drives it, with
:mod:`.structure` (the pytree's structure), :mod:`.plan` (who writes what)
and :mod:`.restore` (giving values back).
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import jax
import numpy as np

from jaxnb._engine.checkpoint import typed_json
from jaxnb._engine.checkpoint.structure import shown

GLOBAL, LOCAL, NUMPY, VALUE = "global", "local", "numpy", "value"

WHAT_TO_DO = (
    "a checkpoint holds arrays, numbers, strings and containers of them (dicts, lists, tuples, "
    "dataclasses, NNX and Optax state); leave it out of the pytree, or save it yourself and "
    "pass the folder as checkpoint="
)


class LeafError(ValueError):
    """A checkpoint leaf that cannot be saved; the message names its path and what to do."""


# ---- one leaf ------------------------------------------------------------------------


@dataclasses.dataclass
class Leaf:
    """One leaf ready to save: ``record`` (JSON) says how to give it back, ``data`` is what is written.

    ``data`` is the ``jax.Array`` itself for ``global`` leaves, a NumPy array for
    ``local`` and ``numpy`` leaves, and the JSON encoding (bytes) for ``value`` leaves.
    """

    path: str
    kind: str
    record: dict[str, Any]
    data: Any
    array: Any = None  # a local leaf's jax.Array (its key data for PRNG keys)

    def raw(self) -> bytes | memoryview:
        """The bytes that identify (and, when saved per process, store) the value."""
        if isinstance(self.data, bytes):
            return self.data
        return np.ascontiguousarray(self.data).reshape(-1).view(np.uint8).data


def dtype_name(dtype: Any) -> str:
    """A name :func:`dtype_of` reads back (``bfloat16`` and other ml_dtypes included)."""
    dtype = np.dtype(dtype)
    try:
        if dtype_of(dtype.name) == dtype:
            return dtype.name
    except TypeError:
        pass
    return dtype.str


def dtype_of(name: str) -> np.dtype:
    import jax.numpy as jnp

    try:
        return np.dtype(jnp.dtype(name))
    except TypeError:
        return np.dtype(name)


def _refuse(path: str, what: str) -> LeafError:
    return LeafError(f"checkpoint leaf {shown(path)} is {what}; {WHAT_TO_DO}")


def _what(x: Any) -> str:
    if isinstance(x, io.IOBase):
        return f"an open file ({type(x).__name__})"
    if callable(x) and hasattr(x, "__name__"):
        return f"a function ({x.__name__})"
    return f"a {type(x).__module__}.{type(x).__qualname__} object"


def prepare(path: str, x: Any, num_processes: int) -> Leaf:
    """Classify leaf ``x`` at ``path``; raise :class:`LeafError` when it cannot be saved."""
    if isinstance(x, jax.core.Tracer):
        raise LeafError(
            f"checkpoint leaf {shown(path)} is a traced value (jaxnb.report was called inside "
            "jit, vmap or grad); call report outside the transformed function"
        )
    if isinstance(x, jax.Array):
        return _prepare_array(path, x, num_processes)
    if isinstance(x, jax.ShapeDtypeStruct):
        raise _refuse(path, "a jax.ShapeDtypeStruct (a shape without values)")
    if isinstance(x, np.ndarray | np.generic):
        arr = np.asarray(x)
        if arr.dtype.hasobject:
            raise _refuse(path, "a NumPy array of Python objects")
        record: dict[str, Any] = {"kind": NUMPY, "dtype": dtype_name(arr.dtype), "shape": list(arr.shape),
                  "scalar": isinstance(x, np.generic)}
        if arr.dtype.kind in "USV" and dtype_of(record["dtype"]).kind in "USV":
            record["inline"] = True  # strings: kept in the manifest (Orbax has no such dtype)
        return Leaf(path, NUMPY, record, np.ascontiguousarray(arr))
    if isinstance(x, bool | int | float | complex | str | bytes):
        return Leaf(path, VALUE, {"kind": VALUE}, encode_value(x))
    raise _refuse(path, _what(x))


def _prepare_array(path: str, x: jax.Array, num_processes: int) -> Leaf:
    if x.is_deleted():
        raise LeafError(
            f"checkpoint leaf {shown(path)} is a jax.Array whose buffer was deleted (donated to "
            "a jitted step, or .delete() was called); pass the array the step returned instead"
        )
    record: dict[str, Any] = {}
    if not x.committed:
        record["committed"] = False  # given back uncommitted (jit may place it with the others)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        record["key_impl"] = str(jax.random.key_impl(x))
        x = jax.random.key_data(x)
    record.update(dtype=dtype_name(x.dtype), shape=list(x.shape))
    if num_processes == 1 or not x.is_fully_addressable:
        record["kind"] = GLOBAL
        return Leaf(path, GLOBAL, record, x)
    record.update(kind=LOCAL, layout=layout(x))
    return Leaf(path, LOCAL, record, np.asarray(x), array=x)


# ---- values (Python scalars, strings, bytes) -----------------------------------------


def encode_value(x: Any) -> bytes:
    """A Python number, string or bytes as typed JSON (:mod:`.typed_json`)."""
    return json.dumps(typed_json.to_json(x)).encode()


def decode_value(raw: bytes | str) -> Any:
    return typed_json.from_json(json.loads(raw))


# ---- where a host-local array lives -------------------------------------------------


def _spec_json(spec: Any) -> list[Any]:
    return [list(e) if isinstance(e, tuple) else e for e in spec]


def layout(x: jax.Array) -> dict[str, Any]:
    """The array's sharding over this process's devices, by local device position (JSON)."""
    local = {d.id: i for i, d in enumerate(jax.local_devices())}
    sharding = x.sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        out = {"type": "named", "axes": list(mesh.axis_names), "mesh": list(mesh.devices.shape),
               "devices": [local[d.id] for d in mesh.devices.flat],
               "spec": _spec_json(sharding.spec)}
        types = getattr(mesh, "axis_types", None)
        if types is not None:
            out["axis_types"] = [t.name for t in types]
        return out
    devices: list[Any] = list(sharding.device_set)
    first = min(devices, key=lambda d: d.id)  # SingleDeviceSharding (or fallback)
    return {"type": "single", "device": local[first.id]}


def sharding_of(lay: dict[str, Any]) -> jax.sharding.Sharding:
    """The sharding :func:`layout` described, on this process's devices (default device if gone)."""
    devices = jax.local_devices()
    if lay["type"] == "named" and max(lay["devices"]) < len(devices):
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        grid = np.array([devices[i] for i in lay["devices"]], dtype=object).reshape(lay["mesh"])
        kwargs = {}
        if "axis_types" in lay:
            kwargs["axis_types"] = tuple(getattr(jax.sharding.AxisType, t) for t in lay["axis_types"])
        mesh = Mesh(grid, tuple(lay["axes"]), **kwargs)
        spec = PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in lay["spec"]))
        return NamedSharding(mesh, spec)
    position = lay.get("device", 0)
    device = devices[position] if position < len(devices) else devices[0]
    return jax.sharding.SingleDeviceSharding(device)


def across_processes(x: jax.Array, lay: dict[str, Any], num_processes: int) -> jax.Array:
    """Host-local ``x``, equal on every process and laid out alike, as one global array.

    Replicated over the processes and built from each process's own buffers (no
    copy), so that Orbax writes it once, as it writes a replicated global array.
    """
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if lay["type"] == "named":
        shape, axes, positions = lay["mesh"], lay["axes"], lay["devices"]
        spec = [tuple(e) if isinstance(e, list) else e for e in lay["spec"]]
    else:
        shape, axes, positions, spec = [1], ["local"], [lay["device"]], []
    grid = [[jax.local_devices(process_index=q)[i] for i in positions] for q in range(num_processes)]
    mesh = Mesh(np.array(grid, dtype=object).reshape([num_processes, *shape]),
                ("jaxnb_process", *axes))
    sharding = NamedSharding(mesh, PartitionSpec(*spec))
    return jax.make_array_from_single_device_arrays(
        x.shape, sharding, [s.data for s in x.addressable_shards])
