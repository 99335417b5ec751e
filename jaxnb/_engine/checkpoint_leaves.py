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
Everything here is pure (no collectives, no files); ``checkpoint.py`` drives it.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import zlib
from typing import Any

import jax
import numpy as np

GLOBAL, LOCAL, NUMPY, VALUE = "global", "local", "numpy", "value"

WHAT_TO_DO = (
    "a checkpoint holds arrays, numbers, strings and containers of them (dicts, lists, tuples, "
    "dataclasses, NNX and Optax state); leave it out of the pytree, or save it yourself and "
    "pass the folder as checkpoint="
)


class LeafError(ValueError):
    """A checkpoint leaf that cannot be saved; the message names its path and what to do."""


# ---- structure: pytrees with plain dataclasses walked field by field -------------------


class DataclassNode:
    """Stands for an instance of a dataclass that is not a registered pytree."""

    def __init__(self, cls: type, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self.cls, self.names, self.values = cls, names, values

    def build(self) -> Any:
        obj = object.__new__(self.cls)
        for name, value in zip(self.names, self.values, strict=True):
            object.__setattr__(obj, name, collapse(value))
        return obj


jax.tree_util.register_pytree_with_keys(
    DataclassNode,
    lambda n: ([(jax.tree_util.GetAttrKey(k), v) for k, v in zip(n.names, n.values, strict=True)],
               (n.cls, n.names)),
    lambda aux, values: DataclassNode(aux[0], aux[1], tuple(values)),
)


def _plain_dataclass(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def expand(tree: Any) -> Any:
    """``tree`` with every unregistered dataclass instance replaced by a :class:`DataclassNode`."""

    def fix(x: Any) -> Any:
        if _plain_dataclass(x):
            names = tuple(f.name for f in dataclasses.fields(x))
            return DataclassNode(type(x), names, tuple(expand(getattr(x, n)) for n in names))
        return x

    return jax.tree.map(fix, tree)


def collapse(tree: Any) -> Any:
    """Undo :func:`expand`."""
    node = lambda x: isinstance(x, DataclassNode)  # noqa: E731
    return jax.tree.map(lambda x: x.build() if node(x) else x, tree, is_leaf=node)


def flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    """Paths (``jax.tree_util.keystr``), leaves and treedef of ``tree`` (dataclasses expanded)."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(expand(tree))
    return [jax.tree_util.keystr(p) for p, _ in pairs], [x for _, x in pairs], treedef


def unflatten(treedef: Any, leaves: list[Any]) -> Any:
    return collapse(jax.tree_util.tree_unflatten(treedef, leaves))


def dump_treedef(treedef: Any) -> str:
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(treedef)).decode()


def load_treedef(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


def shown(path: str) -> str:
    return path or "(the pytree itself)"


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
        return memoryview(np.ascontiguousarray(self.data).reshape(-1).view(np.uint8))


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
        record = {"kind": NUMPY, "dtype": dtype_name(arr.dtype), "shape": list(arr.shape),
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
    if isinstance(x, bool):
        doc: dict[str, Any] = {"t": "bool", "v": x}
    elif isinstance(x, int):
        doc = {"t": "int", "v": x}
    elif isinstance(x, float):
        doc = {"t": "float", "v": x.hex()}
    elif isinstance(x, complex):
        doc = {"t": "complex", "v": [x.real.hex(), x.imag.hex()]}
    elif isinstance(x, str):
        doc = {"t": "str", "v": x}
    else:
        doc = {"t": "bytes", "v": base64.b64encode(bytes(x)).decode()}
    return json.dumps(doc).encode()


def decode_value(raw: bytes | str) -> Any:
    doc = json.loads(raw)
    t, v = doc["t"], doc["v"]
    if t == "float":
        return float.fromhex(v)
    if t == "complex":
        return complex(float.fromhex(v[0]), float.fromhex(v[1]))
    if t == "bytes":
        return base64.b64decode(v)
    return {"bool": bool, "int": int, "str": str}[t](v)


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
    first = min(sharding.device_set, key=lambda d: d.id)  # SingleDeviceSharding (or fallback)
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


# ---- identical on every process? -----------------------------------------------------


#: Fingerprints are taken in pieces this long, on several threads (CRC-32 and NumPy's sum
#: release the GIL), so that a host with spare cores takes them in a fraction of the time.
CHUNK_BYTES = 8 << 20


def _chunk_sums(raw: memoryview | bytes) -> tuple[int, int]:
    """CRC-32 and the 64-bit wrapping sum of the whole 8-byte words of one piece."""
    words = len(raw) // 8
    total = int(np.add.reduce(np.frombuffer(raw[: words * 8], np.uint64), dtype=np.uint64)) \
        if words else 0
    return zlib.crc32(raw), total


def fingerprint(leaf: Leaf, pool: Any = None) -> list[int]:
    """Cheap 96-bit fingerprint of a leaf's value, type and shape: CRC-32s and a 64-bit word sum.

    ``pool`` (a ``concurrent.futures`` executor) takes the pieces of a big leaf in parallel.
    """
    raw = leaf.raw()
    pieces = [raw[i:i + CHUNK_BYTES] for i in range(0, len(raw), CHUNK_BYTES)] or [raw]
    sums = list(pool.map(_chunk_sums, pieces)) if pool is not None and len(pieces) > 1 \
        else [_chunk_sums(p) for p in pieces]
    crc = sums[0][0] if len(sums) == 1 else zlib.crc32(np.array([c for c, _ in sums], np.uint32))
    total = sum(t for _, t in sums) & 0xFFFFFFFFFFFFFFFF
    meta = json.dumps([leaf.kind, leaf.record.get("dtype"), leaf.record.get("shape"),
                       leaf.record.get("scalar"), leaf.record.get("key_impl"), len(raw)])
    tail = bytes(raw[len(raw) // 8 * 8:])  # the bytes the word sum left out
    return [crc, total & 0xFFFFFFFF, total >> 32, zlib.crc32(tail, zlib.crc32(meta.encode()))]


def fingerprints(leaves: list[Leaf]) -> list[list[int] | None]:
    """:func:`fingerprint` of every leaf that is not global (None for those), on threads when big."""
    import concurrent.futures
    import os

    todo = [leaf for leaf in leaves if leaf.kind != GLOBAL]
    size = sum(len(leaf.raw()) for leaf in todo)
    threads = min(8, os.cpu_count() or 1, size // CHUNK_BYTES)
    if threads < 2:
        return [None if leaf.kind == GLOBAL else fingerprint(leaf) for leaf in leaves]
    with concurrent.futures.ThreadPoolExecutor(threads, "jaxnb-fingerprint") as pool:
        small = [pool.submit(fingerprint, leaf) for leaf in todo if len(leaf.raw()) <= CHUNK_BYTES]
        big = {id(leaf): fingerprint(leaf, pool) for leaf in todo if len(leaf.raw()) > CHUNK_BYTES}
        done = iter(f.result() for f in small)
        return [None if leaf.kind == GLOBAL else big.get(id(leaf)) or next(done)
                for leaf in leaves]


def records_json(leaves: list[Leaf]) -> bytes:
    """The records of the leaves that are not saved as global arrays (JSON, one list)."""
    return json.dumps([leaf.record for leaf in leaves], sort_keys=True).encode()


@dataclasses.dataclass
class Plan:
    """Which leaves are written once and what each process writes for itself.

    ``per_process`` lists the (non-global) leaves whose value differs between
    processes; process q's own bytes are ``records_len[q]`` bytes of its records
    (0 when they equal process 0's), then its value of each such leaf, in order
    (``nbytes[q]``).
    """

    shared: list[bool]
    per_process: list[int]
    records_len: list[int]
    nbytes: list[list[int]]

    @property
    def width(self) -> int:
        return max(r + sum(n) for r, n in zip(self.records_len, self.nbytes, strict=True))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def summary(leaves: list[Leaf], paths: list[str], error: str | None) -> dict[str, Any]:
    """What one process tells the others before a save (small; no array data)."""
    if error is not None:
        return {"error": error}
    records = records_json(leaves)
    return {
        "error": None,
        "paths": zlib.crc32("\0".join(paths).encode()),
        "n": len(paths),
        "fp": fingerprints(leaves),
        "nbytes": [0 if leaf.kind == GLOBAL else len(leaf.raw()) for leaf in leaves],
        "records": zlib.crc32(records),
        "records_len": len(records),
    }


def plan(summaries: list[dict[str, Any]], me: int, first_path: str = "") -> Plan:
    """Agree on a :class:`Plan` from every process's :func:`summary` (the same on all).

    Raises ``LeafError`` (this process's own problem) or ``ValueError`` (another's,
    or pytrees that differ between processes).
    """
    mine = summaries[me]
    if mine["error"]:
        raise LeafError(mine["error"])
    for q, s in enumerate(summaries):
        if s["error"]:
            raise ValueError(f"process {q} could not save its checkpoint: {s['error']}")
    base = summaries[0]
    for q, s in enumerate(summaries):
        if s["n"] != base["n"] or s["paths"] != base["paths"]:
            raise ValueError(
                f"the checkpoint pytree of process {q} ({s['n']} leaves) differs from process 0's "
                f"({base['n']} leaves); pass the same structure on every process"
            )
    n = base["n"]
    shared = [base["fp"][i] is None or all(s["fp"][i] == base["fp"][i] for s in summaries)
              for i in range(n)]
    per_process = [i for i in range(n) if not shared[i]]
    records_len = [0 if q == 0 or s["records"] == base["records"] else s["records_len"]
                   for q, s in enumerate(summaries)]
    nbytes = [[s["nbytes"][i] for i in per_process] for s in summaries]
    return Plan(shared, per_process, records_len, nbytes)


def pack(plan_: Plan, me: int, leaves: list[Leaf]) -> bytes:
    """This process's own bytes for the per-process part (see :class:`Plan`)."""
    parts: list[bytes | memoryview] = []
    if plan_.records_len[me]:
        parts.append(records_json(leaves))
    parts += [leaves[i].raw() for i in plan_.per_process]
    return b"".join(parts)


def unpack(plan_: Plan, q: int, row: bytes) -> tuple[list[dict[str, Any]] | None, dict[int, bytes]]:
    """Process q's own records (None: process 0's) and its per-process leaf bytes."""
    at = plan_.records_len[q]
    records = json.loads(row[:at]) if at else None
    values = {}
    for i, size in zip(plan_.per_process, plan_.nbytes[q], strict=True):
        values[i] = row[at:at + size]
        at += size
    return records, values


# ---- giving values back ---------------------------------------------------------------


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
