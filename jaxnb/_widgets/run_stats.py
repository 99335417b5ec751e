"""Per-process report tracking for the training dashboard: steps, steps/s, curves, straggler flags."""

from __future__ import annotations

import itertools
import math
import statistics
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WINDOW_S = 5.0  # steps/s is measured over about this much engine time
GRACE_S = 2.0  # silence longer than this pulls a process's steps/s down
#: A gap between reports is a pause (a compile, a checkpoint, an evaluation), left out of the
#: rate over the steps, when it is this many times the typical time per step...
PAUSE_TIMES = 10.0
#: ... and at least this much longer than that (seconds): small hiccups are steps.
PAUSE_FLOOR_S = 0.05


@dataclass
class ProcessReports:
    """What the dashboard keeps of one process's reports."""

    count: int = 0
    first: tuple[float, int] = (0.0, 0)
    stride: int = 1  # steps between the first two reports: how many steps the first report ended
    step: int = 0
    time: float = 0.0
    offset: float = math.inf  # min(kernel arrival - engine time): maps engine clock to ours
    window: deque[tuple[float, int]] = field(default_factory=deque)
    metrics: dict[str, tuple[array, array]] = field(default_factory=dict)

    def add(self, rec: dict[str, Any], arrival: float) -> None:
        """Book one report that reached the kernel at ``arrival`` (wall clock)."""
        t, step = float(rec["time"]), int(rec["step"])
        self.first = self.first if self.count else (t, step)
        self.stride = max(1, step - self.first[1]) if self.count == 1 else self.stride
        self.count, self.step, self.time = self.count + 1, step, t
        self.offset = min(self.offset, arrival - t)
        self.window.append((t, step))
        while len(self.window) > 2 and self.window[1][0] <= t - WINDOW_S:
            self.window.popleft()
        for name, value in (rec.get("metrics") or {}).items():
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            xs, ys = self.metrics.setdefault(name, (array("d"), array("d")))
            xs.append(step)
            ys.append(v)

    def rewind(self, step: int | None) -> None:
        """Forget the points after ``step`` (``None``: all): a recovered run redoes them."""
        cut = -math.inf if step is None else step
        for name, (xs, ys) in list(self.metrics.items()):
            keep = sum(1 for x in xs if x <= cut)
            self.metrics[name] = (xs[:keep], ys[:keep])
        self.window.clear()
        if self.count:
            self.step = 0 if step is None else min(self.step, step)
            self.window.append((self.time, self.step))

    def age(self, now: float) -> float:
        """Seconds since the last report was made (engine clock offset removed)."""
        return max(0.0, now - self.offset - self.time)

    def busy(self) -> tuple[int, float]:
        """Steps and seconds between the reports of the window, pauses left out: gaps far longer
        than the typical time per step (a compile, a checkpoint, an evaluation)."""
        points = list(self.window)
        gaps = [(t1 - t0, s1 - s0) for (t0, s0), (t1, s1) in itertools.pairwise(points) if s1 > s0]
        if not gaps:
            return 0, 0.0
        per_step = statistics.median(dt / ds for dt, ds in gaps)
        longest = max(PAUSE_TIMES * per_step, per_step + PAUSE_FLOOR_S)  # per step
        kept = [(dt, ds) for dt, ds in gaps if dt <= longest * ds]
        return sum(ds for _, ds in kept), sum(dt for dt, _ in kept)

    def rate(self, now: float) -> float:
        """Steps/s over the steps of the last few seconds (pauses left out); falls while the
        process is silent."""
        steps, seconds = self.busy()
        age = self.age(now)
        seconds += age if age > GRACE_S else 0.0
        return steps / seconds if seconds > 0 else 0.0

    def step_rate(self) -> float:
        """Steps/s over the steps only: the recent window, compiles and pauses left out."""
        steps, seconds = self.busy()
        return steps / seconds if seconds > 0 else 0.0

    def mean_rate(self) -> float:
        """Steps/s from the first report to the last."""
        t0, s0 = self.first
        return max(0.0, (self.step - s0) / (self.time - t0)) if self.time > t0 else 0.0

    def wall_rate(self, elapsed: float) -> float:
        """Steps/s over the run's wall time so far (``elapsed`` seconds: compiles included)."""
        done = self.step - max(0, self.first[1] - self.stride)
        return max(0.0, done / elapsed) if elapsed > 0 and self.count else 0.0

    def curves(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Metric name -> (steps, values) as float arrays; infinities become NaN."""
        out = {}
        for name, (xs, ys) in self.metrics.items():
            y = np.array(ys, dtype=float)
            y[np.isinf(y)] = np.nan
            out[name] = (np.array(xs, dtype=float), y)
        return out


def process_stats(
    procs: Mapping[int, ProcessReports], num_processes: int, now: float, running: bool,
    elapsed: float = 0.0,
) -> list[dict[str, Any]]:
    """Per process: last step, steps/s (recent; over the steps only; over the wall time of
    ``elapsed`` seconds), last report age, flag.

    The flag is "waiting" for a process with no report yet and, while ``running``,
    "silent" for one that stopped reporting or "slow" for one well below the median rate.
    """
    median = statistics.median(p.rate(now) for p in procs.values()) if procs else 0.0
    rows = []
    for i in sorted(set(range(num_processes)) | set(procs)):
        p = procs.get(i)
        row: dict[str, Any] = {"process": i, "step": p and p.step, "steps_per_s": p and p.rate(now),
               "mean_steps_per_s": p and p.step_rate(), "wall_steps_per_s": p and p.wall_rate(elapsed),
               "age_s": p and p.age(now),
               "reports": p.count if p else 0, "flag": "" if p else "waiting"}
        if p and running:
            gap = (p.time - p.first[0]) / max(p.count - 1, 1)
            row["flag"] = ("silent" if row["age_s"] > max(15.0, 5 * gap) else
                           "slow" if len(procs) > 1 and row["steps_per_s"] < 0.7 * median
                           else "")
        rows.append(row)
    return rows
