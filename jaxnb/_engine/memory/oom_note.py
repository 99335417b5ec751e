"""An out-of-memory error, noted where it happens (engine side).

When a cell or a train function raises XLA's ``RESOURCE_EXHAUSTED``, this process notes at once
(before the frames that hold the arrays are gone) which device ran out, how much XLA asked for,
the device's or the host's limit, and the largest live arrays on that device with the
variables that hold them. The notebook takes the note (:func:`take`) to explain the error.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from jaxnb._core.contract import OUT_OF_MEMORY
from jaxnb._engine.memory import holders, readings

#: What XLA says when it cannot make an allocation.
MARK = re.compile(OUT_OF_MEMORY)
#: How many of the largest arrays on the device the note keeps, and the smallest one it shows.
TOP_ARRAYS = 8
MIN_BYTES = 1024
_SIZE = re.compile(r"allocat\w*\s+(\d+)\s*bytes|allocat\w*\s+([\d.]+)\s*([KMGT]i?B)", re.IGNORECASE)
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DEVICE = re.compile(r"\b(?:device|cuda|gpu|tpu)[ :_]?(?:ordinal[ :=]*)?(\d+)", re.IGNORECASE)

_MEMORY = re.compile(r"memory|allocat", re.IGNORECASE)

_noted: dict[str, Any] | None = None
_watching = False


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is XLA refusing an allocation (``RESOURCE_EXHAUSTED``, …): by its
    status code with memory on its first line, or by XLA's words; gRPC's RESOURCE_EXHAUSTED (a
    message too large) is not one."""
    from jaxnb._engine.jax_internals import RESOURCE_EXHAUSTED, status_code

    text = str(error)[:4000]
    if status_code(error) == RESOURCE_EXHAUSTED and _MEMORY.search(text.split("\n", 1)[0]):
        return True
    return MARK.search(text) is not None


def requested_bytes(text: str) -> int | None:
    """The size of the allocation XLA could not make, from its message (``None``: not said)."""
    match = _SIZE.search(text)
    if match is None:
        return None
    if match.group(1):
        return int(match.group(1))
    unit = match.group(3)
    return int(float(match.group(2)) * _UNITS.get(unit[0].upper(), 1))


def named_device(text: str, ids: list[int]) -> int | None:
    """The device id XLA's message names, if it is one of this process's ``ids``."""
    for match in _DEVICE.finditer(text):
        if int(match.group(1)) in ids:
            return int(match.group(1))
    return None


def note(error: BaseException, namespaces: list[tuple[str, Any]]) -> None:
    """Note ``error`` (an out-of-memory) and what this process holds now, for :func:`take`."""
    global _noted
    jax = sys.modules.get("jax")
    if jax is None:
        return
    from jaxnb._engine.group import context

    text = str(error)
    rows = readings.array_rows(jax)
    devices = readings.device_readings(jax, rows)
    chosen = named_device(text, [d["id"] for d in devices])
    if chosen is None:  # not named: the device that holds the most
        chosen = max(devices, key=lambda d: d["in_use"] or 0)["id"] if devices else None
    device = next((d for d in devices if d["id"] == chosen), None)
    on_device = [r for r in rows if chosen in r["devices"]]
    shown = [r for r in on_device if r["bytes_per_device"] >= MIN_BYTES][:TOP_ARRAYS]
    readings.name_rows(shown, namespaces)
    _noted = {
        "process": context.process_index(), "message": first_line(text), "text": text,
        "requested": requested_bytes(text), "device": device,
        "host_memory": readings.host_memory(), "arrays": shown,
        "array_count": len(on_device), "array_bytes": sum(r["bytes_per_device"] for r in on_device),
    }


def note_if_out_of_memory(error: BaseException, namespace: Any) -> None:
    """:func:`note` ``error`` if it is an out-of-memory; never raises (the error goes on)."""
    if not is_out_of_memory(error):
        return
    try:
        note(error, [*holders.frame_namespaces(error.__traceback__, skip=namespace), ("", namespace)])
    except Exception as exc:  # the explanation must never hide the error itself
        print(f"jaxnb: could not note the out-of-memory error: {exc}", file=sys.stderr)


def take(message: str | None = None) -> dict[str, Any] | None:
    """The note of the last out-of-memory error (once), if its first line is ``message``."""
    global _noted
    noted, _noted = _noted, None
    if noted is None or (message is not None and message.strip() not in noted["text"]):
        return None
    from jaxnb._engine.boot import cxx_lines

    return {**noted, "allocator_log": cxx_lines.take_allocator_lines()}  # XLA's lines, folded there


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def watch_cells() -> None:
    """Note every out-of-memory error a cell raises (an IPython ``post_execute`` hook: it runs
    after silent cells too; the error is IPython's ``sys.last_value``, the one ``%debug`` reads)."""
    global _watching
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or _watching:
        return
    _watching = True
    seen: list[BaseException | None] = [getattr(sys, "last_value", None)]

    def after_cell() -> None:
        error = getattr(sys, "last_value", None)
        if error is not seen[0]:  # a new error (held as long as IPython holds it anyway)
            seen[0] = error
            if error is not None:
                note_if_out_of_memory(error, shell.user_ns)

    shell.events.register("post_execute", after_cell)
