"""A dashboard's recoveries and changes of size: the marks on its curves, the process-count
track and their lines of text (the part of :class:`jaxnb._widgets.dashboard.Dashboard` that a
``--max-failures`` or ``--min-processes`` run adds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxnb._core.run_limits import count_text


class RecoveryTrack:
    """What the dashboard keeps of a run's recoveries and sizes (a mixin of ``Dashboard``)."""

    _lock: Any  # a threading.RLock
    _procs: dict[int, Any]
    _dirty: bool
    max_failures: int
    recoveries: list[int]
    recovery_times: list[tuple[float, tuple[str, float] | None]]
    sizes: list[tuple[int, int]]
    resizes: list[tuple[int, int, int]]
    num_processes: int

    def _update(self) -> None:  # the dashboard redraws its text
        raise NotImplementedError

    def set_recoveries(self, max_failures: int) -> None:
        """The run recovers up to ``max_failures`` times: show the count."""
        self.max_failures = max_failures
        self._update()

    def rewind(self, step: int | None, note: str = "") -> None:
        """A recovery resumed from ``step``: drop later points, mark the step on the curves."""
        with self._lock:
            for proc in self._procs.values():
                proc.rewind(step)
            self.recoveries.append(step or 0)
            self._dirty = True
        self._update()

    def resized(self, step: int, old: int, new: int) -> None:
        """The group went on with ``new`` processes (from ``old``) at ``step``; the first call
        starts the process-count track."""
        with self._lock:
            self.sizes.append((step, new))
            if old != new:
                self.resizes.append((step, old, new))
            self.num_processes = new
            self._dirty = True
        self._update()

    def recovery_took(self, seconds: float, longest: tuple[str, float] | None) -> None:
        """The last recovery took ``seconds`` in all, most of it in ``longest`` (phase, seconds)."""
        with self._lock:
            self.recovery_times.append((seconds, longest))
        self._update()

    def _recovered_text(self) -> str:
        """``recovered 1 of 2 (resumed from step 10 in 1.42 s, longest: first step 0.61 s)``."""
        text = f"recovered {count_text(len(self.recoveries), self.max_failures)}"
        if self.recoveries:
            times = list(self.recovery_times)
            each = []
            for i, step in enumerate(self.recoveries):
                took = ""
                if i < len(times):
                    seconds, longest = times[i]
                    took = f" in {seconds:.2f} s" + (
                        f", longest: {longest[0]} {longest[1]:.2f} s" if longest else "")
                each.append(f"{step}{took}")
            text += " (resumed from step " + "; ".join(each) + ")"
        return text

    def _size_track(self, last: int) -> tuple[np.ndarray, np.ndarray]:
        """The process count over the steps, as a step line up to ``last``."""
        xs: list[float] = []
        ys: list[float] = []
        for step, n in self.sizes:
            if ys:
                xs.append(step)
                ys.append(ys[-1])
            xs.append(step)
            ys.append(n)
        xs.append(max(last, xs[-1]))
        ys.append(ys[-1])
        return np.array(xs, float), np.array(ys, float)

    def _sizes_text(self) -> str:
        """``2 of 3 (3→2 at step 10, 2→3 at step 20)``."""
        full = max(n for _, n in self.sizes)
        text = f"{self.num_processes} of {full}"
        if self.resizes:
            text += " (" + ", ".join(f"{a}→{b} at step {s}" for s, a, b in self.resizes) + ")"
        return text
