"""A finished trial of a study as a :class:`TrialResult`: as the search showed it (its
``trial.json``), else from what Optuna kept (a study from an older jaxnb). Used by a resumed
search and by a kernel that follows a search from its folder (:mod:`.attached`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jaxnb._train.result import Result
from jaxnb._tune import trial_record
from jaxnb._tune.feed import metric_value
from jaxnb._tune.result import TrialResult
from jaxnb._tune.view import TuneView


def trial_run_name(number: int) -> str:
    """The run folder of trial ``number`` under the study folder."""
    return f"trial_{number:04d}"


def run_of(t: Any, folder: str) -> str:
    """The run folder of Optuna trial ``t`` in study folder ``folder``."""
    return os.path.join(folder, t.user_attrs.get("run", trial_run_name(t.number)))


def past_trials(study: Any, folder: str, metric: str, base: Mapping[str, Any] | None
                ) -> list[tuple[TrialResult, dict[str, Any]]]:
    """The finished trials of ``study``, in order, with their sampled parameters."""
    from optuna.trial import TrialState

    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [past_trial(t, folder, metric, base) for t in study.get_trials(deepcopy=False)
            if t.state in finished]


def past_trial(t: Any, folder: str, metric: str, base: Mapping[str, Any] | None
               ) -> tuple[TrialResult, dict[str, Any]]:
    """Finished Optuna trial ``t`` and its parameters."""
    path = run_of(t, folder)
    run = Result(os.path.basename(path), path)
    run.set_done()
    return (trial_record.read(run, t.number, base)
            or _from_optuna(t, run, metric, {**(base or {}), **t.params}))


def _from_optuna(t: Any, run: Result, metric: str, config: dict[str, Any]
                 ) -> tuple[TrialResult, dict[str, Any]]:
    """Trial ``t`` and its parameters from what Optuna kept: the metric at each step it was told."""
    from optuna.trial import TrialState

    for step, value in sorted(t.intermediate_values.items()):
        run.add_report({"step": step, metric: value}, step)
    value = t.value if t.state == TrialState.COMPLETE else (
        run.history[-1][metric] if run.history else None)
    trial = TrialResult.of(run, t.number, config, t.state.name, value)
    if t.datetime_start and t.datetime_complete:
        trial.seconds = (t.datetime_complete - t.datetime_start).total_seconds()
    return trial, dict(t.params)


def show_past(view: TuneView, past: TrialResult, params: dict[str, Any], metric: str) -> None:
    """Draw finished trial ``past`` in ``view`` as the search showed it: its curve, its end."""
    view.trial_started(past.number, params)
    for step, metrics in zip(past.steps, past.history, strict=True):
        value = metric_value(metrics, metric)
        if value is not None:
            view.add(past.number, step, value)
    if past.steps:
        view.saw_step(past.number, past.steps[-1])
    view.trial_ended(past.number, past.state, past.value, seconds=past.seconds)
