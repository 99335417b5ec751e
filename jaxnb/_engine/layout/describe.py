"""Describe meshes and array shardings as plain JSON-able dicts (engine side).

Runs on the engines, next to the devices. Only the metadata travels to the
notebook; array data is never read or gathered. The dicts are rendered by
``jaxnb._widgets.mesh_view``, which does not import JAX.
"""

from __future__ import annotations

import socket
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from jaxnb._core.messages import article

__all__ = ["describe", "describe_array", "describe_mesh"]


def describe(obj: Any) -> dict[str, Any]:
    """Describe a ``jax.sharding.Mesh`` or a ``jax.Array``."""
    if isinstance(obj, Mesh):
        return describe_mesh(obj)
    if isinstance(obj, jax.core.Tracer):
        raise TypeError(
            "describe() got a traced value (inside jit/grad); call it outside the traced function"
        )
    if isinstance(obj, jax.Array):
        return describe_array(obj)
    raise TypeError(
        f"describe() got {type(obj).__module__}.{type(obj).__qualname__}; "
        "it accepts a jax.sharding.Mesh or a jax.Array"
    )


def describe_mesh(mesh: Mesh) -> dict[str, Any]:
    """Axis names and sizes, the device grid, and the processes owning the devices."""
    devices = np.asarray(mesh.devices)
    hosts = _process_hosts(devices.flat)
    grid = np.empty(devices.shape, dtype=object)
    for pos, dev in np.ndenumerate(devices):
        grid[pos] = _device_cell(dev, hosts)
    return {
        "kind": "mesh",
        "axis_names": [str(a) for a in mesh.axis_names],
        "axis_sizes": [int(s) for s in devices.shape],
        "axis_types": _axis_types(mesh),
        "devices": grid.tolist(),
        "processes": _process_list(hosts),
    }


def describe_array(x: jax.Array) -> dict[str, Any]:
    """Shape, dtype, sharding, and the index block every device holds (no data read)."""
    shape = tuple(int(n) for n in x.shape)
    sharding = x.sharding
    index_map = sharding.devices_indices_map(shape)
    hosts = _process_hosts(index_map)

    blocks: dict[tuple[tuple[int, int], ...], list[Any]] = {}
    for dev, index in index_map.items():
        key = block_of(index, shape)
        blocks.setdefault(key, []).append(dev)

    block_list = []
    device_list: list[Any] = []
    for b, key in enumerate(sorted(blocks)):
        devs = sorted(blocks[key], key=lambda d: d.id)
        block_list.append(
            {
                "index": [list(iv) for iv in key],
                "devices": [int(d.id) for d in devs],
                "process_indices": sorted({int(d.process_index) for d in devs}),
                "replicas": len(devs),
            }
        )
        device_list.extend(
            {"id": int(d.id), "process_index": int(d.process_index), "block": b} for d in devs
        )
    device_list.sort(key=lambda d: d["id"])

    sharding_desc = _describe_sharding(sharding, len(shape))
    return {
        "kind": "array",
        "shape": list(shape),
        "dtype": str(x.dtype),
        "sharding": sharding_desc,
        "blocks": block_list,
        "devices": device_list,
        "fully_replicated": len(block_list) == 1 and len(device_list) > 1,
        "axes": _axis_summary(shape, list(blocks), sharding_desc.get("spec")),
        "processes": _process_list(hosts),
    }


def _describe_sharding(sharding: Any, rank: int) -> dict[str, Any]:
    desc: dict[str, Any] = {"type": type(sharding).__name__, "repr": repr(sharding)}
    if isinstance(sharding, NamedSharding):
        mesh = sharding.mesh
        spec = [_spec_entry(e) for e in sharding.spec]
        spec += [None] * (rank - len(spec))
        used = {a for e in spec if isinstance(e, list) for a in e}
        desc.update(
            mesh_axis_names=[str(a) for a in mesh.axis_names],
            mesh_axis_sizes=[int(s) for s in mesh.devices.shape],
            spec=spec,
            replicated_over=[str(a) for a in mesh.axis_names if str(a) not in used],
        )
    return desc


def _spec_entry(entry: Any) -> list[str] | str | None:
    """A PartitionSpec entry as a list of mesh axis names (or None, or a marker's name)."""
    if entry is None:
        return None
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, (tuple, list)):
        return [str(a) for a in entry]
    return str(entry)  # e.g. P.UNCONSTRAINED


def _axis_summary(
    shape: tuple[int, ...], keys: list[tuple[tuple[int, int], ...]], spec: list[Any] | None
) -> list[dict[str, Any]]:
    axes = []
    for i, size in enumerate(shape):
        shards = len({key[i] for key in keys})
        entry = spec[i] if spec is not None else None
        if isinstance(entry, list):
            by: list[str] | str | None = entry
        elif shards == 1:
            by = "replicated"
        else:
            by = entry  # sharded, but not by named mesh axes (or unknown)
        axes.append(
            {"axis": i, "size": size, "shards": shards, "block": -(-size // shards), "by": by}
        )
    return axes


def block_of(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The ``(start, stop)`` of each axis of the block a device's ``index`` (its slices) holds."""
    return tuple(_bounds(s, n) for s, n in zip(index, shape, strict=True))


def _bounds(index: Any, size: int) -> tuple[int, int]:
    if isinstance(index, slice):
        start, stop, _ = index.indices(size)
        return (start, stop)
    return (int(index), int(index) + 1)


def _device_cell(dev: Any, hosts: dict[int, str | None]) -> dict[str, Any]:
    proc = int(dev.process_index)
    return {
        "id": int(dev.id),
        "process_index": proc,
        "platform": str(dev.platform),
        "kind": str(dev.device_kind),
        "host": hosts.get(proc),
    }


def _process_hosts(devices: Any) -> dict[int, str | None]:
    """Process index -> host name; only the current process's host is known here."""
    me = jax.process_index()
    hosts: dict[int, str | None] = {}
    for dev in devices:
        proc = int(dev.process_index)
        hosts[proc] = socket.gethostname() if proc == me else None
    return hosts


def _process_list(hosts: dict[int, str | None]) -> list[dict[str, Any]]:
    return [{"index": p, "host": hosts[p]} for p in sorted(hosts)]


def _axis_types(mesh: Mesh) -> list[str] | None:
    types = getattr(mesh, "axis_types", None)
    if types is None:
        return None
    return [getattr(t, "name", str(t)) for t in types]


def describe_named(name: str) -> dict[str, Any]:
    """Describe the mesh or array called ``name`` in the engine's namespace (``%jax_mesh``)."""
    from jaxnb._engine.layout.tree import describe_tree, is_tree_of_arrays
    from jaxnb._engine.run.values import lookup

    value = lookup(name)
    try:
        desc = describe(value)
    except TypeError:
        if not is_tree_of_arrays(value):
            kind = type(value).__name__
            raise TypeError(
                f"{name!r} is {article(kind)}; %jax_mesh draws a jax.sharding.Mesh, a jax.Array "
                "or a pytree of arrays (e.g. a dict of parameters)"
            ) from None
        desc = describe_tree(value)
    desc["name"] = name
    return desc
