"""Whether the engines of a group still run something, asked of the controller through
ipyparallel (the only channel): a background run, or a trial whose kernel is gone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def busy(client: Any, engines: Iterable[int]) -> bool:
    """Whether any of ``engines`` (ipyparallel engine ids) has a request queued or running."""
    queue = client.queue_status()
    return any((queue.get(e) or {}).get("queue", 0) for e in engines)
