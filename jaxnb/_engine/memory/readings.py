"""Memory readings of this process (engine side): per device, of the process, and its live
arrays, as JSON-able dicts (``%jax_cluster memory``, the dashboard, an out-of-memory error).

A device that keeps statistics (GPU, TPU: ``device.memory_stats()``) gives bytes in use, peak
and limit. A CPU device keeps none: its "in use" is the sum of the live arrays it holds
(``source: "live arrays"``), and the process's resident memory (RSS) and the host's memory
(or the memory cgroup's limit) stand beside it, labelled as such.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from jaxnb._engine.memory.holders import find_holders

#: How many of the largest arrays a snapshot lists.
TOP_ARRAYS = 10


def device_name(device: Any) -> str:
    """``cpu:0``, ``gpu:3``: the platform and JAX's id of the device."""
    return f"{device.platform}:{device.id}"


def host_memory() -> dict[str, int | None]:
    """This process's resident memory (``rss``) and its peak, and the host's memory: ``total``
    (the memory cgroup's limit when lower), ``available``."""
    status = _fields("/proc/self/status")
    info = _fields("/proc/meminfo")
    total = info.get("MemTotal")
    limit = cgroup_limit()
    if limit is not None and (total is None or limit < total):
        total = limit
    rss, peak = status.get("VmRSS"), status.get("VmHWM")
    if rss is None:  # no /proc (macOS): the peak from getrusage (bytes there, KiB on Linux)
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rss": rss, "peak_rss": peak, "total": total, "available": info.get("MemAvailable")}


def cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), or ``None`` when it has none."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files = [f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup/unified{path}/memory.max"]
        elif "memory" in controllers.split(","):
            files = [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"]
        else:
            continue
        for name in files:
            try:
                with open(name) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 2**60:  # "max", or v1's "no limit" (near 2**63)
                return int(text)
    return None


def _fields(path: str) -> dict[str, int]:
    """``Name: 123 kB`` lines of a /proc file, in bytes."""
    found = {}
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(":")
                parts = value.split()
                if parts and parts[0].isdigit():
                    found[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return found


def array_rows(jax: Any) -> list[dict[str, Any]]:
    """Every live array that has a shard on this process, largest per device first: shape,
    dtype, sharding, bytes per device, this process's devices that hold it."""
    rows = []
    for x in jax.live_arrays():
        try:
            if x.is_deleted() or (x.is_ready() and _failed(x)):
                continue
            rows.append(_row(x))
        except Exception:  # an array being deleted by another thread
            continue
    rows.sort(key=lambda r: -r["bytes_per_device"])
    return rows


def _failed(x: Any) -> bool:
    """A computed array whose computation failed (an out-of-memory): it holds no memory."""
    try:
        x.block_until_ready()  # at once: it is ready
    except Exception:
        return True
    return False


def _row(x: Any) -> dict[str, Any]:
    shape = tuple(int(n) for n in x.shape)
    sharding = x.sharding
    shard = tuple(int(n) for n in sharding.shard_shape(shape))
    blocks = math.prod(-(-s // b) if b else 1 for s, b in zip(shape, shard, strict=True))
    every = len(sharding.device_set)
    mine = sorted(int(d.id) for d in sharding.addressable_devices)
    return {"id": id(x), "name": None, "shape": list(shape), "dtype": str(x.dtype),
            "sharding": sharding_text(sharding, every),
            "bytes_per_device": math.prod(shard) * x.dtype.itemsize,
            "devices": mine, "global_devices": every, "replicas": max(every // max(blocks, 1), 1)}


def sharding_text(sharding: Any, devices: int) -> str:
    """``P('data', None)``, ``replicated on 8 devices`` or ``one device``."""
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        text = str(spec).replace("PartitionSpec", "P")
        replicated = devices > 1 and sharding.is_fully_replicated
        return f"{text} replicated on {devices} devices" if replicated else text
    if devices == 1:
        return "one device"
    if sharding.is_fully_replicated:
        return f"replicated on {devices} devices"
    return type(sharding).__name__


def device_readings(jax: Any, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per local device: bytes in use, peak and limit (from the device, or from the live arrays
    in ``rows``, listed here when not given and a device keeps no statistics)."""
    stats = {}
    for device in jax.local_devices():
        try:
            stats[device] = device.memory_stats()
        except Exception:  # a platform without statistics
            stats[device] = None
    if rows is None:
        rows = [] if all(stats.values()) else array_rows(jax)
    live: dict[int, int] = {}
    for row in rows:
        for d in row["devices"]:
            live[d] = live.get(d, 0) + row["bytes_per_device"]
    found = []
    for device, stat in stats.items():
        reading: dict[str, Any] = {"id": int(device.id), "name": device_name(device),
                                   "kind": str(device.device_kind), "live_arrays": live.get(device.id, 0)}
        if stat:
            reading.update(source="device", in_use=stat.get("bytes_in_use"),
                           peak=stat.get("peak_bytes_in_use"),
                           limit=stat.get("bytes_limit") or stat.get("bytes_reservable_limit"))
        else:
            reading.update(source="live arrays", in_use=live.get(device.id, 0), peak=None, limit=None)
        found.append(reading)
    return found


def name_rows(rows: list[dict[str, Any]], namespaces: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Fill each row's ``name``: the variable (and pytree path) that holds the array."""
    names = find_holders((r["id"] for r in rows), namespaces)
    for row in rows:
        row["name"] = names.get(row["id"])


def snapshot(top: int = TOP_ARRAYS) -> dict[str, Any]:
    """This process's memory for ``%jax_cluster memory``: devices, the process, the ``top``
    largest live arrays (named by the variables of the engine's namespace)."""
    from jaxnb._engine import jax_internals
    from jaxnb._engine.group import context
    from jaxnb._engine.run.values import user_namespace

    found: dict[str, Any] = {"process": context.process_index(), "host": socket.gethostname(),
                             "pid": os.getpid(), "host_memory": host_memory(), "devices": [],
                             "arrays": [], "array_count": 0, "array_bytes": 0}
    jax = sys.modules.get("jax")
    if jax is None or not jax_internals.backends_created():
        return found  # no backend yet: nothing on any device (and none started by asking)
    rows = array_rows(jax)
    found["devices"] = device_readings(jax, rows)
    found["array_count"] = len(rows)
    found["array_bytes"] = sum(r["bytes_per_device"] * len(r["devices"]) for r in rows)
    name_rows(rows[:top], [("", user_namespace())])
    found["arrays"] = rows[:top]
    return found
