"""One trial's reports -> Optuna (``trial.report``, pruning) and the search's view.

A :class:`TrialFeed` stands in for the training dashboard of the trial's run
(``driver.train(view=...)``): the run's monitor hands it every report batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from jaxnb._tune.view import TuneView

LEAD = 0  # process 0's reports are the run's (as for the Result)


class TrialFeed:
    """Feeds process 0's reports of ``metric`` to ``trial``; calls ``stop()`` once it should prune.

    Reports that arrive after the prune (those the processes made before the stop
    reached them) are told too, so that Optuna's value of the pruned trial is its last
    report of the metric, as jaxnb's is.
    """

    def __init__(self, trial: Any, metric: str, view: TuneView | None,
                 stop: Callable[[], None]) -> None:
        self.trial, self.metric, self.view, self._stop = trial, metric, view, stop
        self.number = trial.number
        self.pruned = False
        self.pruned_at: int | None = None  # the step whose report the pruner judged
        self.pruned_time: float | None = None  # when it judged it (time.time())
        self.reports = 0
        self.keys: set[str] = set()  # every metric name process 0 reported
        self.last: float | None = None
        self.last_step: int | None = None
        self.told: set[int] = set()  # steps Optuna has a value for (it keeps the first)
        self.recoveries = 0

    # ---- the dashboard interface the run's monitor calls ------------------------------

    def __call__(self, run_name: str, num_processes: int, total_steps: int | None = None,
                 on_stop: Any = None) -> TrialFeed:
        """``driver.train``'s dashboard factory: this feed is the run's dashboard."""
        return self

    def show(self) -> None:
        """(the search's view is already shown)"""

    def add(self, records: list[dict[str, Any]]) -> None:
        """Book process 0's reports; report the metric to Optuna and prune if it says so."""
        for rec in records:
            if rec["process"] != LEAD:
                continue
            self.reports += 1
            metrics = rec.get("metrics") or {}
            if len(self.keys) < 64:
                self.keys.update(metrics)
            step = int(rec["step"])
            if self.view is not None:
                self.view.saw_step(self.number, step)
            value = metric_value(metrics, self.metric)
            if value is None:
                continue
            self.last, self.last_step = value, step
            if self.view is not None:
                self.view.add(self.number, step, value)
            if not math.isfinite(value) or step in self.told:
                continue  # a step redone after a recovery: Optuna already has it
            self.told.add(step)
            self.trial.report(value, step)
            if not self.pruned and self.trial.should_prune():
                self.pruned, self.pruned_at, self.pruned_time = True, step, time.time()
                self._stop()

    def add_sample(self, process: int, sample: dict[str, Any]) -> None:
        """(a trial's memory and time are in its Result; the search's view does not show them)"""

    def refresh(self, force: bool = False) -> bool:
        return self.view.refresh(force) if self.view is not None else False

    def set_status(self, status: str, message: str = "") -> None:
        """(the search's view shows the trial's state once it ends)"""

    def finish(self, status: str = "finished", message: str = "") -> None:
        """(the runner tells the view how the trial ended)"""

    def set_recoveries(self, max_failures: int) -> None:
        """(the trial's row counts its recoveries once it has one)"""

    def recovery_took(self, seconds: float, longest: tuple[str, float] | None) -> None:
        """(the trial's ``Result.failures`` has each recovery's phases)"""

    def rewind(self, step: int | None, note: str = "") -> None:
        """A recovery resumed the trial from ``step`` (``None``: from the start): its curve
        goes on from there; the steps it redoes are not told to Optuna twice."""
        self.recoveries += 1
        if self.view is not None:
            self.view.rewind(self.number, step, self.recoveries)


def metric_value(metrics: Mapping[str, Any], metric: str) -> float | None:
    """The number a report holds for ``metric``, or None (not there, or not a number)."""
    value = metrics.get(metric)
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v
