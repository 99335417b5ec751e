"""Every use of Grain's private parts, in one place (written against grain 0.2).

A ``MapDataset`` reads a batch of indices at once with ``_getitems``: a source that supports
batched reads (``SupportsBatchedReadRandomAccessDataSource``: ArrayRecord, Parquet) is read in
one call, and each transformation does its bookkeeping once per batch instead of once per
record. Grain's own ``batch`` and ``to_iter_dataset`` use it; it has no public name. If a
Grain release drops it, records are read one by one again (as ``dataset[i]``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: The Grain version this read was written against.
WRITTEN_FOR = "0.2"


def batch_reader(dataset: Any) -> Callable[[Sequence[int]], Sequence[Any]] | None:
    """``dataset``'s read of many indices at once (a Grain ``MapDataset``), or None."""
    import grain

    if not isinstance(dataset, grain.MapDataset):
        return None
    read = getattr(dataset, "_getitems", None)
    return read if callable(read) else None
