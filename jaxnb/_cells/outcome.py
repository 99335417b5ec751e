"""What a cell run on every process produced (:class:`CellOutcome`): light, so that
``JaxCluster``'s signatures name it without loading the cell machinery."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class CellOutcome:
    """What each process produced: errors and the last expression's value."""

    errors: dict[int, Any]
    results: dict[int, dict | None]
    #: With ``value=True``: the cell's value (process 0's), for ``Out[n]``; ``None`` if none.
    value: Any = None
    #: The third-party modules the cell imported on process 0 (what warm spares import).
    imported: list[str] = dataclasses.field(default_factory=list)
