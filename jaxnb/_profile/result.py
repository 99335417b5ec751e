"""``ProfileResult``: what ``%%jax_profile -o VAR`` gives back."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxnb._core.messages import plural
from jaxnb._profile import steps as step_logic


@dataclasses.dataclass
class ProfileResult:
    """One profiled cell: the run folder, the merged trace, per-step times, the straggler.

    ``path`` is the folder for ``xprof --logdir`` (or TensorBoard); ``perfetto`` the merged
    trace file (``None`` when no process's trace came back); ``steps`` one dict per process
    and step (``process``, ``step``, ``total_ms``, ``compute_ms``, ``collective_ms``,
    ``host_ms``); ``straggler`` the index of the process the others wait for, or ``None``;
    ``cause`` the part of its step that is longer (``"host_ms"``, ``"compute_ms"``).
    ``clock_offsets_ms`` is each process's clock minus process 0's as measured at the start,
    ``clock_error_ms`` how far (at most) its events may sit off process 0's on the merged
    timeline. ``error`` is the cell's exception (the trace up to it is kept), else ``None``.
    """

    path: str
    perfetto: str | None
    steps: list[dict[str, Any]]
    straggler: int | None
    cause: str | None = None
    session: str = ""
    hosts: dict[int, str] = dataclasses.field(default_factory=dict)
    files: dict[int, str] = dataclasses.field(default_factory=dict)
    clock_offsets_ms: dict[int, float] = dataclasses.field(default_factory=dict)
    clock_error_ms: dict[int, float] = dataclasses.field(default_factory=dict)
    missing: dict[int, str] = dataclasses.field(default_factory=dict)
    error: BaseException | None = None

    def summary(self) -> dict[int, dict[str, float]]:
        """Per process, the median of each time over the steps all processes recorded."""
        return step_logic.medians(self.steps)

    def verdict(self) -> str:
        """One line: the straggler and where its extra time goes, or that there is none (none is
        named for a cell that failed: its steps end at the error)."""
        if self.error is not None:
            return "no straggler named: the cell failed, so each process's steps end at its error"
        return step_logic.explain(self.steps)

    def __repr__(self) -> str:
        who = f"p{self.straggler}" if self.straggler is not None else "none"
        return (f"<ProfileResult {plural(len(self.hosts), 'process', 'processes')}, "
                f"{plural(len(self.steps), 'step row')}, "
                f"straggler={who}, path={self.path!r}>")
