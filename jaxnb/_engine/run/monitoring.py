"""What a training run sends beside its reports: memory, where the time went, FLOPs per step.

:func:`start` starts a run's clock (:mod:`.timing`) and its FLOPs count (:mod:`.step_cost`) on
the thread that runs it; the report publisher calls the returned :class:`Sampler` about once a
second, off the training loop, and publishes what it says under ``MONITOR_KEY`` (the latest
sample is what counts: each holds totals since the start of the attempt).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from jaxnb._engine.memory import readings
from jaxnb._engine.run import step_cost, timing

#: Off for a bench's baseline (``bench/monitoring.py``): runs then send no samples.
ENABLED = True
#: How often a run's sample is published (seconds).
SAMPLE_SECONDS = 1.0


class Sampler:
    """The samples of one run on this process."""

    def __init__(self, clock: timing.RunClock, cost: step_cost.StepCost) -> None:
        self.clock, self.cost = clock, cost
        self.peak_in_use = 0  # where the device keeps no peak (CPU): the highest sample
        self.samples, self.seconds = 0, 0.0  # what sampling itself cost (bench/monitoring.py)

    def __call__(self) -> dict[str, Any]:
        """This run's totals so far (JSON-able)."""
        began = time.perf_counter()
        cost = self.cost
        sample: dict[str, Any] = {"started": self.clock.started_at, "time": self.clock.parts(),
                                  "flops_per_step": cost.flops, "flops_source": cost.source,
                                  "flops_error": cost.error, **self.memory()}
        self.samples += 1
        self.seconds += time.perf_counter() - began
        return sample

    def memory(self) -> dict[str, Any]:
        """The busiest local device (in use, peak, limit), the process's RSS, the host's memory."""
        host = readings.host_memory()
        found: dict[str, Any] = {"memory": {"rss": host["rss"], "peak_rss": host["peak_rss"],
                                            "host_total": host["total"]}}
        jax = sys.modules.get("jax")
        from jaxnb._engine import jax_internals

        if jax is None or not jax_internals.backends_created():
            return found
        devices = readings.device_readings(jax)
        if not devices:
            return found
        busiest = max(devices, key=lambda d: d["in_use"] or 0)
        peak = busiest["peak"]
        if peak is None:
            self.peak_in_use = peak = max(self.peak_in_use, busiest["in_use"] or 0)
        found["memory"].update(device=busiest["name"], source=busiest["source"], in_use=busiest["in_use"],
                               peak=peak, limit=busiest["limit"])
        found.update(device_kind=busiest["kind"], platform=busiest["name"].split(":")[0],
                     local_devices=len(devices))
        return found


_sampler: Sampler | None = None


def start(fn: Any = None) -> Sampler | None:
    """Start measuring the run of ``fn`` about to begin on this thread; its sampler (``None``:
    off)."""
    global _sampler
    _sampler = Sampler(timing.start(), step_cost.start(fn)) if ENABLED else None
    return _sampler


def own_cost() -> dict[str, float]:
    """What the last run's sampling took on this process: samples, seconds (a bench reads it)."""
    if _sampler is None:
        return {"samples": 0, "seconds": 0.0}
    return {"samples": _sampler.samples, "seconds": _sampler.seconds}


def stop() -> None:
    """The run's function has returned or raised."""
    timing.stop()


def at_report(step_fn: Any) -> None:
    """At each ``report()``: take ``step_fn`` (when given) and read the FLOPs of the jitted
    calls compiled since the last report."""
    cost = step_cost.current()
    if cost is None or not ENABLED:
        return
    if step_fn is not None:
        cost.give(step_fn)
    if cost.pending:
        cost.settle()
