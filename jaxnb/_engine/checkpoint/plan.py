"""Who writes what: a host-local leaf equal on every process (a fingerprint of its bytes,
compared across processes) is written once; one that differs is written by every process."""

from __future__ import annotations

import dataclasses
import json
import zlib
from typing import Any

import numpy as np

from jaxnb._engine.checkpoint.leaves import GLOBAL, Leaf, LeafError

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
    crc = sums[0][0] if len(sums) == 1 else zlib.crc32(np.array([c for c, _ in sums], np.uint32).tobytes())
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
