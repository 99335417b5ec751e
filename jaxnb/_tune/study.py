"""The Optuna study of a search, kept in a journal file under ``DIR/STUDY`` (no database server)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jaxnb._core.file_lock import FileLock
from jaxnb._core.spelling import example
from jaxnb._tune import lease
from jaxnb._tune.lease import Hold

JOURNAL = "study.journal"
#: User attribute on a trial a search lost while it ran (marked FAIL, re-run on resume).
INTERRUPTED = "jaxnb_interrupted"
RERUN_OF = "jaxnb_rerun_of"

EXISTS = ("study {name!r} already exists in {dir}; pass {resume} to continue it, or {new} for a "
          "new study")
NO_STUDY_YET = "jaxnb: study {name!r} has no trials yet in {dir}; starting it"
WRONG_DIRECTION = ("study {name!r} in {dir} was made with {was}; pass {was} to resume it, or {new} "
                   "for a new study")


@dataclass
class Opened:
    """A study ready for trials: ``study``, how many trials count as done, which were re-queued,
    and this search's ``hold`` on it (``release()`` it when the search ends)."""

    study: Any
    folder: str
    hold: Hold
    done: int = 0
    requeued: list[int] = field(default_factory=list)
    told: list[int] = field(default_factory=list)  # ended on the engines: told COMPLETE


def open_study(folder: str, name: str, direction: str, pruner: Any, sampler: Any,
               resume: bool, metric: str | None = None,
               base: Mapping[str, Any] | None = None) -> Opened:
    """Create (or, with ``resume``, load) study ``name`` kept in ``folder/study.journal``.

    Holds the study for this search (:mod:`.lease`): refused in one line while another
    search runs it, so creating it if absent and taking trials over are atomic. Resuming
    marks a trial left RUNNING by a search whose kernel died FAIL and queues its parameters
    again, unless its run ended well on the engines (with ``metric``: then it is told COMPLETE,
    :mod:`.ended`); finished trials are kept.
    """
    locked = lease.lock(folder, name)
    try:
        return _open(folder, name, direction, pruner, sampler, resume, locked, metric, base)
    except BaseException:
        locked.release()
        raise


def _open(folder: str, name: str, direction: str, pruner: Any, sampler: Any, resume: bool,
          locked: FileLock, metric: str | None, base: Mapping[str, Any] | None) -> Opened:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = os.path.join(folder, JOURNAL)
    exists = os.path.exists(path) and os.path.getsize(path) > 0
    if exists and not resume:
        raise FileExistsError(EXISTS.format(name=name, dir=folder, resume=example("resume", True),
                                            new=example("name", "NEW")))
    if resume and not exists:
        print(NO_STUDY_YET.format(name=name, dir=folder))
    storage = JournalStorage(JournalFileBackend(path))
    study = optuna.create_study(study_name=name, storage=storage,
                                direction=optuna.study.StudyDirection[direction.upper()],
                                pruner=pruner, sampler=sampler, load_if_exists=resume)
    was = study.direction.name.lower()
    if was != direction:
        mode = example("mode", "min" if was == "minimize" else "max")
        raise ValueError(WRONG_DIRECTION.format(name=name, dir=folder, was=mode,
                                                new=example("name", "NEW")))
    opened = Opened(study, folder, lease.Hold(study, locked, name, folder))
    if resume:
        try:
            _recover(opened, metric, base)
        except BaseException:
            opened.hold.release()
            raise
    return opened


def _recover(opened: Opened, metric: str | None, base: Mapping[str, Any] | None) -> None:
    from optuna.trial import TrialState

    from jaxnb._tune import ended

    study = opened.study
    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.RUNNING and metric is not None and ended.counted(
                study, trial, opened.folder, metric, base):
            opened.told.append(trial.number)
        elif trial.state == TrialState.RUNNING:
            study.set_user_attr(f"{INTERRUPTED}_{trial.number}", True)
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={RERUN_OF: trial.number},
                                skip_if_exists=False)
            opened.requeued.append(trial.number)
    opened.done = counted(study)


def counted(study: Any) -> int:
    """Trials that count towards ``--trials``: finished, except those lost with the kernel."""
    from optuna.trial import TrialState

    lost = {k for k in study.user_attrs if k.startswith(INTERRUPTED)}
    finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state in finished and f"{INTERRUPTED}_{t.number}" not in lost)


def lost_with_kernel(study: Any, number: int) -> bool:
    """Whether trial ``number`` was left RUNNING by a lost kernel (and re-queued)."""
    return bool(study.user_attrs.get(f"{INTERRUPTED}_{number}"))
