"""``JaxCluster.train(profile_steps=(A, B))`` (``%jax_train … --profile-steps A:B``): trace steps
A to B of a training run on every process.

The engines open and close the trace inside ``jaxnb.report()`` (a step is the time
between two reports), agreed through the coordination service like ``%%jax_profile``;
after the run the files come back, merge and show as for a profiled cell, into the
run's own folder (``DIR/RUN/plugins/profile/SESSION``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.spelling import example, option
from jaxnb._core.state import Group
from jaxnb._profile import folder as run_folder
from jaxnb._profile import session
from jaxnb._profile import show as showing
from jaxnb._profile.result import ProfileResult
from jaxnb._train.function import run_name
from jaxnb._train.result import Result

_ARM = EngineCall("jaxnb._engine.profile.recording:arm_steps")
_FINISH = EngineCall("jaxnb._engine.profile.recording:finish_steps")


def window(steps: tuple[int, int] | str, background: bool) -> tuple[int, int]:
    """``(A, B)`` or ``"A:B"`` as (A, B) with 1 ≤ A ≤ B; a one-line ``ValueError`` otherwise."""
    if background:
        raise ValueError(f"{option('profile_steps')} does not go with "
                         f"{example('background', True)}; drop one of them")
    first, last = steps if isinstance(steps, tuple) else (None, None)
    if isinstance(steps, str):
        head, sep, tail = steps.partition(":")
        if sep and head.strip().isdigit() and tail.strip().isdigit():
            first, last = int(head), int(tail)
    if isinstance(first, int) and isinstance(last, int) and first >= 1:
        if first <= last:
            return first, last
        raise ValueError(f"{example('profile_steps', (first, last), f'{first}:{last}')}: the first "
                         "step comes after the last; e.g. "
                         f"{example('profile_steps', (last, first), f'{last}:{first}')}")
    raise ValueError(f"{option('profile_steps')} takes the first and last step to trace "
                     f"(1 ≤ FIRST ≤ LAST), got {steps!r}; e.g. "
                     f"{example('profile_steps', (10, 20), '10:20')}")


def traced(group: Group, fn: Any, name: str | None, storage: str | os.PathLike[str] | None,
           steps: tuple[int, int], train: Callable[[Callable[[Result], None]], Result],
           on_result: Callable[[Result], None] | None) -> Result:
    """``train(keep)`` (a training run) with ``steps`` traced on every process; the ``Result``
    gets ``.profile`` (a ``ProfileResult``), also when the run fails."""
    seen: list[Result] = []

    def keep(result: Result) -> None:
        seen.append(result)
        if on_result is not None:
            on_result(result)

    where = arm(group, storage, run_name(fn, name), steps)
    try:
        return train(keep)
    finally:
        profile = collect(group, where)
        for result in seen:
            result.profile = profile


def arm(group: Group, storage: str | os.PathLike[str] | None, name: str,
        window: tuple[int, int]) -> run_folder.RunFolder:
    """Prepare the run's profile folder and arm every process to trace the window."""
    where = run_folder.prepare(storage, name)
    key = f"{where.session}-{secrets.token_hex(4)}"
    group.view.apply_async(_ARM, key, window[0], window[1], session.START_AGREE_S).get(
        timeout=session.START_AGREE_S + 30)
    return where


def collect(group: Group, where: run_folder.RunFolder, display: bool = True) -> ProfileResult:
    """After the run: fetch what every process recorded, merge, show the step table."""
    started: dict[int, dict[str, Any]] = {}
    stopped: dict[int, dict[str, Any]] = {}
    missing: dict[int, str] = {}
    for p in group.indices:
        try:
            found = group.engine(p).apply_async(_FINISH).get(timeout=session.CALL_S)
        except BaseException as exc:
            missing[p] = f"no reply ({type(exc).__name__})"
            continue
        if found["stop"] is None:
            missing[p] = "the run ended before the first profiled step"
            continue
        started[p], stopped[p] = found["start"], dict(found["stop"], steps_ns=found["steps_ns"])
    result, parts = session.collect(group, where, started, stopped, missing)
    if display:
        showing.show(result, session.timeline_png(result, parts))
    return result

