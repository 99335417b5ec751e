"""Memory readings as the notebook shows them: devices (in use, peak, limit), processes (RSS),
the largest live arrays (shape, dtype, sharding, bytes per device, the variable holding each).

The engines send plain dicts (``jaxnb._engine.memory.readings``); this module turns them into
table cells and text. :class:`MemoryReport` is what ``JaxCluster.memory()`` returns.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxnb._core.messages import label
from jaxnb._core.text_table import columns, human_bytes

DEVICE_HEAD = ["process", "device", "in use", "peak", "limit", "process RSS (peak)"]
ARRAY_HEAD = ["array", "shape", "dtype", "sharding", "per device", "on"]
#: A live array that no variable of the namespace holds (a temporary, a cache, a closure).
NO_VARIABLE = "(no variable)"
#: How many arrays the merged table lists.
TOP_ARRAYS = 10


def limit_text(device: dict[str, Any] | None, host: dict[str, Any] | None) -> str:
    """The device's limit, or the host's memory where the device has none (CPU)."""
    if device is not None and device.get("limit"):
        return human_bytes(device["limit"])
    total = (host or {}).get("total")
    return f"host memory {human_bytes(total)}" if total else "—"


def in_use_text(device: dict[str, Any]) -> str:
    """``1.2 GB``, or ``12.3 MB live arrays`` where the device keeps no statistics (CPU)."""
    text = human_bytes(device.get("in_use"))
    return text if device.get("source") == "device" else f"{text} live arrays"


def rss_text(host: dict[str, Any] | None) -> str:
    """``1.1 GB (peak 1.3 GB)``: the process's resident memory."""
    host = host or {}
    if host.get("rss") is None:
        return "—"
    return f"{human_bytes(host['rss'])} (peak {human_bytes(host.get('peak_rss'))})"


def device_cells(processes: list[dict[str, Any]]) -> list[list[str]]:
    """One row per process and device: :data:`DEVICE_HEAD`'s cells."""
    rows = []
    for proc in processes:
        host = proc.get("host_memory")
        devices = proc.get("devices") or [None]
        for i, device in enumerate(devices):
            rss = rss_text(host) if i == 0 else ""
            if device is None:
                rows.append([label(proc["process"]), "(no JAX backend yet)", "—", "—",
                             limit_text(None, host), rss])
                continue
            rows.append([label(proc["process"]) if i == 0 else "", f"{device['name']} ({device['kind']})",
                         in_use_text(device), human_bytes(device.get("peak")), limit_text(device, host), rss])
    return rows


def array_cells(row: dict[str, Any], where: str = "") -> list[str]:
    """One array: :data:`ARRAY_HEAD`'s cells (``where``: the processes or devices holding it)."""
    return [row.get("name") or NO_VARIABLE, str(tuple(row["shape"])), row["dtype"], row["sharding"],
            human_bytes(row["bytes_per_device"]), where]


def merged_arrays(processes: list[dict[str, Any]], top: int = TOP_ARRAYS) -> list[dict[str, Any]]:
    """The largest arrays over every process; an array found on several processes (a global
    array, the same variable everywhere) is one row with ``processes`` listing them."""
    merged: dict[tuple, dict[str, Any]] = {}
    for proc in processes:
        for row in proc.get("arrays") or []:
            key = (row.get("name"), tuple(row["shape"]), row["dtype"], row["sharding"],
                   row["bytes_per_device"])
            entry = merged.setdefault(key, {**row, "processes": [], "device_count": 0})
            entry["processes"].append(proc["process"])
            entry["device_count"] += len(row["devices"])
    ordered = sorted(merged.values(), key=lambda r: -r["bytes_per_device"] * r["device_count"])
    return ordered[:top]


def where_text(row: dict[str, Any]) -> str:
    """``2 devices: p0, p1``."""
    count = row["device_count"]
    procs = ", ".join(label(p) for p in row["processes"])
    return f"{count} device{'s' * (count != 1)}: {procs}"


def report_text(processes: list[dict[str, Any]], top: int = TOP_ARRAYS) -> str:
    """The memory table and the largest arrays, as aligned text."""
    lines = ["memory per process and device:", *columns([DEVICE_HEAD, *device_cells(processes)])]
    arrays = merged_arrays(processes, top)
    if arrays:
        lines += ["", f"largest live arrays (of {sum(p.get('array_count', 0) for p in processes)}):",
                  *columns([ARRAY_HEAD, *(array_cells(r, where_text(r)) for r in arrays)])]
    else:
        lines += ["", "no live arrays"]
    return "\n".join(lines)


@dataclasses.dataclass
class MemoryReport:
    """What ``JaxCluster.memory()`` found: one dict per process (``process``, ``host``,
    ``pid``, ``devices`` with ``in_use``/``peak``/``limit``/``source``, ``host_memory`` with
    ``rss``/``peak_rss``/``total``, ``arrays``: its largest live arrays)."""

    processes: list[dict[str, Any]]

    @property
    def arrays(self) -> list[dict[str, Any]]:
        """The largest live arrays over every process (one row per array, its ``processes``)."""
        return merged_arrays(self.processes)

    def text(self) -> str:
        """The tables as aligned text."""
        return report_text(self.processes)

    def __repr__(self) -> str:
        return self.text()


def memory_cell(memory: dict[str, Any] | None) -> str:
    """A process's memory during a run, in one cell: ``1.2 GB (peak 3.4 GB) of 80.0 GB`` on a
    device that keeps statistics; ``12.3 MB arrays (peak 30.1 MB) · RSS 1.1 GB`` on CPU."""
    if not memory:
        return "—"
    rss = f"RSS {human_bytes(memory['rss'])}" if memory.get("rss") is not None else ""
    if memory.get("in_use") is None:
        peak = f" (peak {human_bytes(memory['peak_rss'])})" if memory.get("peak_rss") else ""
        return rss + peak if rss else "—"
    peak = f" (peak {human_bytes(memory['peak'])})" if memory.get("peak") is not None else ""
    if memory.get("source") == "device":
        limit = f" of {human_bytes(memory['limit'])}" if memory.get("limit") else ""
        return f"{human_bytes(memory['in_use'])}{peak}{limit}"
    return f"{human_bytes(memory['in_use'])} arrays{peak}" + (f" · {rss}" if rss else "")
