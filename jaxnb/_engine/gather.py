"""Every process's small JSON document, gathered on every process.

Through the ``jax.distributed`` key-value store (no XLA collective: nothing to
compile, no device sync, nothing queued behind gloo work); with no coordination
client, through ``multihost_utils.process_allgather`` of the padded bytes.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from jaxnb._engine import stopping

KEY_ROOT = "jaxnb/gather/"


class Gatherer:
    """Gathers for one sequence of collective calls; ``prefix`` must be unique to it.

    Every process makes the same calls in the same order. A process deletes its
    key of call k-1 once it has read everyone's key of call k: by then every
    process has read call k-1.
    """

    def __init__(self, prefix: str, process: int, num_processes: int) -> None:
        self.prefix = f"{KEY_ROOT}{prefix}/"
        self.process, self.num_processes = process, num_processes
        self.client: Any = stopping.kv_client() if num_processes > 1 else None
        self.calls = 0

    def __call__(self, doc: Any) -> list[Any]:
        call, self.calls = self.calls, self.calls + 1
        if self.num_processes == 1:
            return [doc]
        text = json.dumps(doc)
        if self.client is None:
            return _allgather_xla(text, self.num_processes)
        self.client.key_value_set(self._key(call, self.process), text)
        docs = [json.loads(self._get(self._key(call, q))) for q in range(self.num_processes)]
        if call:
            with contextlib.suppress(Exception):
                self.client.key_value_delete(self._key(call - 1, self.process))
        return docs

    def forget(self) -> None:
        """Delete this process's key of the last call (once every process has read it)."""
        if self.client is not None and self.calls:
            with contextlib.suppress(Exception):
                self.client.key_value_delete(self._key(self.calls - 1, self.process))

    def _key(self, call: int, process: int) -> str:
        return f"{self.prefix}{call}/{process}"

    def _get(self, key: str) -> str:
        while True:  # in slices, so that an interrupt gets through
            try:
                return self.client.blocking_key_value_get(key, stopping.WAIT_SLICE_MS)
            except Exception as exc:  # only a timeout slice is retried
                if "DEADLINE_EXCEEDED" not in str(exc):
                    raise


def _allgather_xla(text: str, num_processes: int) -> list[Any]:
    import numpy as np
    from jax.experimental import multihost_utils

    raw = np.frombuffer(text.encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.array([raw.size], np.int32))
    padded = np.zeros(int(np.max(sizes)), np.uint8)
    padded[: raw.size] = raw
    rows = np.asarray(multihost_utils.process_allgather(padded))
    return [json.loads(rows[q, : int(sizes[q][0])].tobytes()) for q in range(num_processes)]


def clear_keys() -> None:
    """Delete every gather key (process 0, while no run is going)."""
    client = stopping.kv_client()
    if client is not None:
        with contextlib.suppress(Exception):
            client.key_value_delete(KEY_ROOT)
