"""``%jax_train … --profile-steps A:B``: trace steps A to B of a training run on every process.

The engines open and close the trace inside ``jaxnb.report()`` (a step is the time
between two reports), agreed through the coordination service like ``%%jax_profile``;
after the run the files come back, merge and show as for a profiled cell, into the
run's own folder (``DIR/RUN/plugins/profile/SESSION``).
"""

from __future__ import annotations

import secrets
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.state import Group
from jaxnb._profile import folder as run_folder
from jaxnb._profile import session
from jaxnb._profile import show as showing
from jaxnb._profile.result import ProfileResult

_ARM = EngineCall("jaxnb._engine.profile.recording:arm_steps")
_FINISH = EngineCall("jaxnb._engine.profile.recording:finish_steps")


def parse_window(text: str) -> tuple[int, int]:
    """``"A:B"`` → (A, B) with 1 ≤ A ≤ B; a ``ValueError`` (one line, with an example) otherwise."""
    first, sep, last = text.partition(":")
    if sep and first.strip().isdigit() and last.strip().isdigit():
        a, b = int(first), int(last)
        if 1 <= a <= b:
            return a, b
        if a > b:
            raise ValueError(f"--profile-steps {text}: the first step comes after the last; "
                             f"e.g. --profile-steps {b}:{a}")
    raise ValueError(f"--profile-steps takes FIRST:LAST steps (1 ≤ FIRST ≤ LAST), got {text!r}; "
                     "e.g. --profile-steps 10:20")


def arm(group: Group, storage: str | None, name: str, window: tuple[int, int]) -> run_folder.RunFolder:
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

