"""The numbers a run is given about failures and checkpoints, checked up front.

``max_failures``: recoveries after a lost process or host; ``-1`` is no limit (Ray's
``FailureConfig(max_failures=-1)``). ``keep_checkpoints``: how many of the run's newest
checkpoints Orbax keeps (Ray's ``CheckpointConfig(num_to_keep=N)``).
"""

from __future__ import annotations

from jaxnb._core.spelling import example, option

#: ``max_failures=-1``: recover after every loss, however many.
UNLIMITED = -1
#: Checkpoints kept per run unless ``keep_checkpoints`` says otherwise.
KEEP_CHECKPOINTS = 3


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_max_failures(max_failures: int) -> None:
    """``max_failures`` is a whole number >= 0, or -1 for no limit (a one-line ``ValueError``)."""
    if not _whole(max_failures) or max_failures < UNLIMITED:
        raise ValueError(f"{option('max_failures')} takes a whole number >= 0, or -1 for no "
                         f"limit, got {max_failures!r}; e.g. {example('max_failures', 2)}")


def exhausted(failures: int, max_failures: int) -> bool:
    """Whether ``failures`` losses are more than ``max_failures`` allows (never with -1)."""
    return max_failures != UNLIMITED and failures > max_failures


def count_text(failures: int, max_failures: int) -> str:
    """``1 of 2``, or ``1, no limit`` for -1 (``recovered 1 of 2``)."""
    return f"{failures}, no limit" if max_failures == UNLIMITED else f"{failures} of {max_failures}"


def check_keep_checkpoints(keep: int) -> None:
    """``keep_checkpoints`` is a whole number >= 1 (a one-line ``ValueError`` otherwise)."""
    if not _whole(keep) or keep < 1:
        raise ValueError(f"{option('keep_checkpoints')} takes a whole number >= 1 (the newest "
                         f"checkpoints kept), got {keep!r}; e.g. {example('keep_checkpoints', 3)}")


def check_limits(max_failures: int, keep_checkpoints: int) -> None:
    """Both checks above, for a run's keywords."""
    check_max_failures(max_failures)
    check_keep_checkpoints(keep_checkpoints)
