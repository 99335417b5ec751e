"""How many steps a run will report, for the dashboard's progress and ETA (``--steps``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxnb._core.spelling import example, option

#: Config keys that give the number of steps.
STEP_COUNT_KEYS = ("total_steps", "num_steps", "max_steps")


def expected_steps(config: Any, total_steps: int | None) -> int | None:
    """How many steps the run will report, if known: ``total_steps``, else from the config."""
    if total_steps is not None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"{option('steps')} takes a positive whole number, got "
                             f"{total_steps!r}; e.g. {example('steps', 1000)}")
        return total_steps
    if isinstance(config, Mapping):
        for key in STEP_COUNT_KEYS:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
