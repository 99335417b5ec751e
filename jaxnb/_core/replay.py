"""Replay: the setup that succeeded since start, run again on new engines, in order.

jaxnb records each ``%%jax_cluster`` cell that succeeded on every process and
each ``%jax_push``; ``%jax_cluster restart --replay`` and a training run's
recovery (``--max-failures``) run them again, so the engines' Python state
comes back. Not recorded: cells that failed, ``--process I`` cells and
``%jax_pull`` (it changes nothing on the engines). Pushed values are kept by
reference: a replay sends them as they are at replay time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
from collections.abc import Callable
from typing import Any

from jaxnb._core.errors import RemoteError, traceback_text

REPLAY_FAILED = (
    "replaying setup step {index} of {total} ({what}) failed on the new engines: {error}; "
    "the engines ran the steps before it: fix the cell shown above and run it (and the "
    "setup after it) again"
)


class ReplayError(RemoteError):
    """A recorded setup step failed when it ran again on new engines (the cell is shown).

    Raised by ``restart(replay=True)`` (``%jax_cluster restart --replay``); the replay stops at
    that step. Fix the cell, run it again, then go on.
    """


@dataclasses.dataclass(frozen=True)
class Step:
    """One recorded setup step: a cell's code, or the values of a push."""

    kind: str  # "cell" or "push"
    code: str = ""
    timeout: float | None = None
    values: tuple[tuple[str, Any], ...] = ()

    def describe(self) -> str:
        """``cell: first line`` or ``push: a, b``."""
        if self.kind == "push":
            return "%jax_push " + " ".join(name for name, _ in self.values)
        first = next((ln for ln in self.code.splitlines() if ln.strip()), "")
        return f"%%jax_cluster cell `{first.strip()[:60]}`"


@dataclasses.dataclass
class Replay:
    """The recorded setup, in order."""

    steps: list[Step] = dataclasses.field(default_factory=list)

    def cell(self, code: str, timeout: float | None = None) -> None:
        """Record a ``%%jax_cluster`` cell that succeeded on every process."""
        self.steps.append(Step("cell", code=code, timeout=timeout))

    def push(self, values: dict[str, Any]) -> None:
        """Record the values of a ``%jax_push`` that succeeded."""
        self.steps.append(Step("push", values=tuple(values.items())))

    def clear(self) -> None:
        """Forget every step (new engines that start empty)."""
        self.steps.clear()

    def __len__(self) -> int:
        return len(self.steps)

    def summary(self) -> str:
        """``2 cells and 1 push``."""
        cells = sum(s.kind == "cell" for s in self.steps)
        pushes = len(self.steps) - cells
        return f"{cells} cell{'s' * (cells != 1)} and {pushes} push{'es' * (pushes != 1)}"

    def run(
        self,
        run_cell: Callable[[str, float | None], Any],
        push: Callable[[dict[str, Any]], None],
    ) -> float:
        """Run every step again, output hidden; the seconds it took.

        ``run_cell(code, timeout)`` and ``push(values)`` do the work on the
        engines. The first step that fails raises :class:`ReplayError` showing it.
        """
        started = time.monotonic()
        for index, step in enumerate(list(self.steps), 1):
            hidden = io.StringIO()
            try:
                with contextlib.redirect_stdout(hidden), contextlib.redirect_stderr(hidden):
                    if step.kind == "cell":
                        run_cell(step.code, step.timeout)
                    else:
                        push(dict(step.values))
            except Exception as exc:
                error = getattr(exc, "summary", None) or f"{type(exc).__name__}: {exc}"
                shown = step.code if step.kind == "cell" else step.describe()
                summary = REPLAY_FAILED.format(
                    index=index, total=len(self.steps), what=step.describe(),
                    error=(str(error).splitlines() or [type(exc).__name__])[0])
                tracebacks = [f"---- setup step {index} ----\n{shown.rstrip()}",
                              *getattr(exc, "tracebacks", [traceback_text(exc)])]
                raise ReplayError(summary, list(getattr(exc, "processes", [])),
                                  tracebacks) from None
        return time.monotonic() - started
