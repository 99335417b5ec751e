"""Join the processes' parts of the merged Perfetto trace (notebook side, no parsing).

Each engine writes its events already regrouped as its own process group and shifted
onto the agreed time axis (``jaxnb._engine.profile.parts``); joining is byte copying.
"""

from __future__ import annotations

import gzip
import os
import shutil


def join_parts(parts: list[str], path: str) -> None:
    """Write the merged trace ``path`` from the processes' parts (gzipped fragments of events,
    each already regrouped and shifted by its process), without parsing them; remove the parts."""
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b'{"displayTimeUnit":"ns","traceEvents":[')
        first = True
        for part in parts:
            with gzip.open(part, "rb") as f:
                head = f.read(1)
                if not head:
                    continue
                if not first:
                    out.write(b",")
                out.write(head)
                shutil.copyfileobj(f, out, 1 << 20)
                first = False
        out.write(b"]}")
    for part in parts:
        os.remove(part)
