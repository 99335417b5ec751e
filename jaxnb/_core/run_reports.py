"""A run's reports and its end in its run folder (``reports.jsonl``): the source of truth
for a kernel that attaches later (``cluster.result(RUN)``, ``%jax_train --attach``).

Process 0 of the engines appends one JSON object a line (never pickle): ``start`` at each
attempt (``resume``: the checkpoint step it goes on from, ``None``: from the beginning),
``report`` for each of its reports, ``end`` when the function returned or raised (``error``:
its one-line text, or ``None``; ``stopped``; ``resized_at`` for a size change, not an end).
The reader applies the driver's rule of ``Result.history``: an attempt's ``start`` forgets
the reports after its ``resume`` step (they are redone).
"""

from __future__ import annotations

import json
import os
from typing import Any

#: The file's name in the run folder.
REPORTS_FILE = "reports.jsonl"


def path(run_dir: str) -> str:
    """Where the run in ``run_dir`` keeps its reports."""
    return os.path.join(run_dir, REPORTS_FILE)


def line(event: dict[str, Any]) -> str:
    """One event as a JSON line (a value JSON cannot hold is written as its ``repr``)."""
    try:
        return json.dumps(event, default=repr) + "\n"
    except (TypeError, ValueError):  # keys that are not strings, a circular value
        metrics = {str(k): repr(v) for k, v in (event.get("metrics") or {}).items()}
        return json.dumps({**event, "metrics": metrics}, default=repr) + "\n"


class Tail:
    """Reads the events appended to a run's file since the last call (whole lines only)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.offset = 0

    def exists(self) -> bool:
        """Whether the file is there."""
        return os.path.isfile(self.file)

    def _since(self, offset: int) -> bytes | None:
        """The file's bytes from ``offset`` on; None when there is no file."""
        try:
            with open(self.file, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return None

    def read(self) -> list[dict[str, Any]]:
        """The events of the lines completed since the last call, in order."""
        data = self._since(self.offset)
        if data is None:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self.offset += end
        events = []
        for raw in data[:end].splitlines():
            try:
                event = json.loads(raw)
            except ValueError:  # a line cut by a crash: skipped, the next attempt goes on
                continue
            if isinstance(event, dict):
                events.append(event)
        return events
