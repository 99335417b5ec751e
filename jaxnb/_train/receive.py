"""Read one process's report batches from its ``AsyncResult`` data, in order, none lost."""

from __future__ import annotations

from typing import Any

from jaxnb._core.contract import REPORT_KEY as KEY


class Receiver:
    """Takes batches ``jaxnb/0``, ``jaxnb/1``, ... out of one engine's ``ar.data`` dict.

    ipyparallel's client thread adds keys to ``data`` as messages arrive; each
    batch is taken out once read, so memory stays flat on long runs.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.batches = 0
        self.count = 0
        self.missing = 0  # reports that never arrived (should stay 0)

    def take(self) -> list[dict[str, Any]]:
        """Every record that arrived since the last call, in report order."""
        records: list[dict[str, Any]] = []
        while True:
            batch = self.data.pop(f"{KEY}{self.batches}", None)
            if batch is None:
                break
            self.batches += 1
            records.extend(batch)
        if records:
            self.missing += records[-1]["seq"] + 1 - self.count - len(records)
            self.count = records[-1]["seq"] + 1
        return records
