"""A trial that ran to its end on the engines after its search's kernel died: Optuna was never
told, but its run folder holds every report and its end (``reports.jsonl``). ``--resume`` counts
it (COMPLETE, its last report of the metric) instead of running it again, and keeps it as the
search shows trials (``trial.json``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jaxnb._core import run_reports
from jaxnb._train import followed
from jaxnb._tune import trial_record
from jaxnb._tune.feed import metric_value
from jaxnb._tune.past import run_of
from jaxnb._tune.result import TrialResult


def counted(study: Any, t: Any, folder: str, metric: str, base: Mapping[str, Any] | None) -> bool:
    """Tell Optuna trial ``t`` (left RUNNING) COMPLETE when its run ended well and reported
    ``metric``; whether it did."""
    run_dir = run_of(t, folder)
    if not os.path.isfile(run_reports.path(run_dir)):
        return False
    run = followed.follow(None, run_dir, os.path.basename(run_dir), None)  # type: ignore[arg-type]
    values = [metric_value(m, metric) for m in run.history]
    value = next((v for v in reversed(values) if v is not None), None)
    if run.running or run.error is not None or run.stopped or value is None or value != value:
        return False  # still going, failed, stopped (pruned?), or no value: run it again
    study.tell(t.number, value)
    trial = TrialResult.of(run, t.number, {**(base or {}), **t.params}, "COMPLETE", value)
    trial_record.write(trial, dict(t.params))
    return True
