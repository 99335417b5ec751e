"""A finished trial as the search showed it, kept in its run folder (``trial.json``).

Optuna keeps only what it was told (the metric at each step, once), so a trial
rebuilt from its record alone could show another value, step count and curve
after ``--resume``. This record keeps the trial's own: state, value, time, and
process 0's reports with their steps. JSON only: reading it back runs no code.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from jaxnb._core import safe_files
from jaxnb._train.result import Result
from jaxnb._tune.result import TrialResult

FILE = "trial.json"
VERSION = 1
STATES = ("COMPLETE", "PRUNED", "FAIL")


def write(trial: TrialResult, params: Mapping[str, Any]) -> None:
    """Save a finished ``trial`` and its sampled ``params`` (config keys) in its run folder, whole
    or not at all (a crash keeps the old file).

    A failure to write is a warning: the search goes on (a resume then shows Optuna's record)."""
    doc = {"version": VERSION, "number": trial.number, "params": dict(params),
           "state": trial.state, "value": trial.value,
           "seconds": trial.seconds, "stopped": trial.stopped, "stopped_at": trial.stopped_at,
           "pruned_at": trial.pruned_at, "pruned_time": trial.pruned_time, "steps": trial.steps,
           "history": trial.history}
    path = os.path.join(trial.path, FILE)
    try:
        safe_files.write_whole(path, json.dumps(doc, default=repr).encode(),
                               within=os.path.dirname(trial.path))
    except OSError as exc:
        print(f"jaxnb: could not save trial {trial.number}'s record in {path} ({exc}); a resumed "
              "search will show what Optuna kept of it", file=sys.stderr)


def read(run: Result, number: int, base: Mapping[str, Any] | None
         ) -> tuple[TrialResult, dict[str, Any]] | None:
    """Trial ``number`` (filled into ``run``, its config ``base`` updated by its parameters) and
    its parameters, as saved in ``run.path``; None when there is no record of it there (a study
    from an older jaxnb, a trial lost with its kernel)."""
    try:
        with open(os.path.join(run.path, FILE)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not _valid(doc, number):
        return None
    for step, metrics in zip(doc["steps"], doc["history"], strict=True):
        run.add_report(metrics, step)
    run.stopped, run.stopped_at = bool(doc["stopped"]), _int(doc.get("stopped_at"))
    params = doc["params"]
    trial = TrialResult.of(run, number, {**(base or {}), **params}, doc["state"], _float(doc["value"]))
    trial.seconds, trial.pruned_at = _float(doc["seconds"]), _int(doc.get("pruned_at"))
    trial.pruned_time = _float(doc.get("pruned_time"))
    return trial, params


def _valid(doc: Any, number: int) -> bool:
    return (isinstance(doc, dict) and doc.get("version") == VERSION and doc.get("number") == number
            and doc.get("state") in STATES and isinstance(doc.get("params"), dict)
            and isinstance(doc.get("steps"), list)
            and isinstance(doc.get("history"), list) and len(doc["steps"]) == len(doc["history"])
            and all(isinstance(s, int) and not isinstance(s, bool) for s in doc["steps"])
            and all(isinstance(h, dict) for h in doc["history"]))


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)  # NaN too: a trial whose metric went NaN showed NaN


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
