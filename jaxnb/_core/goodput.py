"""Where a training run's wall time went, measured on the engines: compile, steps, data wait,
checkpoint, recovery, idle; and each process's memory over the run.

Each process sends samples (``MONITOR_KEY``) holding its attempt's totals: the seconds it spent
compiling, waiting for data (jaxnb's datasets), saving or restoring checkpoints, and in its
function; the rest of the function's time is its steps. :class:`ProcessSamples` adds the
attempts of a recovered run up. :func:`split` divides the run's wall time (measured in the
notebook) per process: the engine's parts, the recovery (from a death seen to the resumed
function's start), and idle (the rest: starting, waiting for the others, ending). The parts
shown are the mean over processes, so they add up to the wall time; the slowest process is
named for each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxnb._core.messages import label

#: Measured on each engine.
ENGINE_PARTS = ("compile", "steps", "data", "checkpoint")
#: Every part of the wall time, in the order shown.
PARTS = ("steps", "compile", "data", "checkpoint", "recovery", "idle")
NAMES = {"steps": "steps", "compile": "compile", "data": "data wait", "checkpoint": "checkpoint",
         "recovery": "recovery", "idle": "idle"}


class ProcessSamples:
    """One process's samples over the attempts of a run: the latest, its time parts summed over
    the attempts, and its memory's peak."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] | None = None
        self._done = dict.fromkeys((*ENGINE_PARTS, "in_function"), 0.0)  # attempts before this one
        self._attempt: float | None = None
        self._now: dict[str, float] = {}
        self.peak: int | None = None  # device (or live arrays') peak over the run
        self.peak_rss: int | None = None

    def add(self, sample: dict[str, Any]) -> None:
        """Book a sample (totals since its attempt began)."""
        started = sample.get("started")
        if self._attempt is not None and started != self._attempt:  # a new attempt (recovery)
            for part, seconds in self._now.items():
                self._done[part] = self._done.get(part, 0.0) + seconds
        self._attempt, self._now = started, dict(sample.get("time") or {})
        self.latest = sample
        memory = sample.get("memory") or {}
        for key, value in (("peak", memory.get("peak") or memory.get("in_use")),
                           ("peak_rss", memory.get("peak_rss"))):
            if value is not None:
                setattr(self, key, max(getattr(self, key) or 0, value))

    def parts(self) -> dict[str, float]:
        """Seconds per engine part and ``in_function``, over every attempt so far."""
        return {part: self._done.get(part, 0.0) + self._now.get(part, 0.0) for part in self._done}

    def memory(self) -> dict[str, Any]:
        """The latest memory reading with the run's peaks (``peak``, ``peak_rss``)."""
        memory = dict((self.latest or {}).get("memory") or {})
        memory.update(peak=self.peak, peak_rss=self.peak_rss)
        return memory


def split(wall: float, samples: Mapping[int, ProcessSamples], recovery: float = 0.0) -> dict[str, Any]:
    """The run's ``wall`` seconds split into :data:`PARTS` (mean over processes), the slowest
    process of each part, each process's own split, and ``goodput`` (the steps' share)."""
    per: dict[int, dict[str, float]] = {}
    for p, found in sorted(samples.items()):
        parts = found.parts()
        in_function = parts.pop("in_function")
        per[p] = {**{k: parts.get(k, 0.0) for k in ENGINE_PARTS}, "recovery": recovery,
                  "idle": max(wall - recovery - in_function, 0.0)}
    if not per:
        per_mean = {**dict.fromkeys(PARTS, 0.0), "recovery": recovery, "idle": max(wall - recovery, 0.0)}
    else:
        per_mean = {k: sum(v[k] for v in per.values()) / len(per) for k in PARTS}
    slowest = {}
    for part in (*ENGINE_PARTS, "idle") if per else ():
        seconds, p = max((v[part], q) for q, v in per.items())
        slowest[part] = {"process": p, "seconds": seconds}
    return {"wall": wall, "parts": per_mean, "slowest": slowest, "processes": per,
            "goodput": per_mean["steps"] / wall if wall > 0 else 0.0}


def goodput_text(goodput: dict[str, Any] | None) -> str:
    """``steps 81% · compile 7% (slowest [p1]: 2.1 s) · … of 42.0 s``: the slowest process is
    named where it stands out (10% over the mean, and 5% of the wall time)."""
    if not goodput or goodput["wall"] <= 0:
        return "—"
    wall, several = goodput["wall"], len(goodput.get("processes") or {}) > 1
    parts = []
    for part in PARTS:
        seconds = goodput["parts"][part]
        text = f"{NAMES[part]} {100 * seconds / wall:.0f}%"
        slow = goodput["slowest"].get(part)
        if several and slow and slow["seconds"] > max(0.05 * wall, 1.1 * seconds):  # stands out
            text += f" (slowest {label(slow['process'])}: {slow['seconds']:.1f} s)"
        parts.append(text)
    return " · ".join(parts) + f" of {wall:.1f} s"
