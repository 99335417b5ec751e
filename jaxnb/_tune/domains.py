"""Search-space helpers that read like Ray Tune's (``jaxnb.tune.uniform``, ...): plain records,
turned into Optuna distributions when a trial is sampled (:mod:`.space`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Domain:
    """One dimension of a search space (turned into an Optuna distribution when sampled)."""

    kind: str  # "uniform", "loguniform", "int", "choice"
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    choices: tuple[Any, ...] = ()


def uniform(lower: float, upper: float) -> Domain:
    """A float drawn uniformly from ``[lower, upper]`` (Ray's ``tune.uniform``).

    Raises:
        ValueError: the bounds are not two numbers with lower < upper (one line).
    """
    return Domain("uniform", *_bounds("uniform", lower, upper))


def quniform(lower: float, upper: float, q: float) -> Domain:
    """A float from ``[lower, upper]`` in steps of ``q`` (Ray's ``tune.quniform``).

    Raises:
        ValueError: ``q`` is not positive, or the bounds are wrong (one line).
    """
    if not q > 0:
        raise ValueError(f"quniform: q must be positive, got {q!r}; e.g. quniform(0, 1, 0.1)")
    return Domain("uniform", *_bounds("quniform", lower, upper), step=float(q))


def loguniform(lower: float, upper: float) -> Domain:
    """A float drawn uniformly in log space from ``[lower, upper]``, both > 0 (Ray's ``tune.loguniform``).

    Raises:
        ValueError: ``lower`` is not above 0, or the bounds are wrong (one line).
    """
    low, high = _bounds("loguniform", lower, upper)
    if low <= 0:
        raise ValueError(f"loguniform needs lower > 0, got {lower!r}; e.g. loguniform(1e-4, 1e-1)")
    return Domain("loguniform", low, high)


def randint(lower: int, upper: int) -> Domain:
    """An int from ``lower`` up to ``upper`` EXCLUDED, as Ray's ``tune.randint``.

    Raises:
        ValueError: the bounds are not two ints with lower < upper (one line).
    """
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lower, upper)):
        raise ValueError(f"randint takes two ints, got ({lower!r}, {upper!r}); e.g. randint(1, 5)")
    if upper <= lower:
        raise ValueError(f"randint needs lower < upper (upper excluded), got ({lower}, {upper})")
    return Domain("int", lower, upper - 1)


def choice(categories: Sequence[Any]) -> Domain:
    """One of ``categories`` (Ray's ``tune.choice``): numbers, strings, bools or None.

    Raises:
        ValueError: ``categories`` is empty or not a list (one line).
    """
    values = tuple(categories) if not isinstance(categories, str | bytes) else ()
    if not values:
        raise ValueError(f"choice takes a non-empty list, got {categories!r}; e.g. choice([32, 64])")
    return Domain("choice", choices=values)


def _bounds(name: str, lower: Any, upper: Any) -> tuple[float, float]:
    try:
        low, high = float(lower), float(upper)
    except (TypeError, ValueError):
        raise ValueError(f"{name} takes two numbers, got ({lower!r}, {upper!r}); "
                         f"e.g. {name}(0.0, 1.0)") from None
    if not low < high:
        raise ValueError(f"{name} needs lower < upper, got ({lower!r}, {upper!r})")
    return low, high
