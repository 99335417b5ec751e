"""A search followed from its study folder (``%jax_tune --attach --name STUDY``,
``cluster.result(STUDY)``) by a kernel that attached the cluster: a live :class:`TuneResult` and
the search's view, filled from what the search keeps on disk.

The study (``STUDY/study.journal``) is the source of truth: its finished trials (with their
``trial.json``), the trial that runs (its ``reports.jsonl``, every report since it began), what
the search recorded of itself (:mod:`.search_info`) and its lease (:mod:`.lease`: which kernel
drives it). The Optuna driver of a search lives in the kernel that started it; when that kernel
is gone, the trial it had started runs to its end on the engines, nothing asks for the next one,
and the follower ends, saying so in one line and how to go on (``--resume``, which counts
that trial when it ended well: :mod:`.ended`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import threading
import time
from typing import Any

from jaxnb._core import run_reports
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.spelling import example
from jaxnb._tune import search_info, trial_record
from jaxnb._tune.feed import metric_value
from jaxnb._tune.lease import Lease
from jaxnb._tune.options import DEFAULT_METRIC
from jaxnb._tune.past import past_trial, run_of, show_past
from jaxnb._tune.result import TuneResult
from jaxnb._tune.study import JOURNAL
from jaxnb._tune.view import TuneView

#: How often the study and the running trial's reports are read again (seconds).
POLL_SECONDS = 0.1
#: How long a finished trial's ``trial.json`` is waited for (the driver writes it just after).
RECORD_SECONDS = 5.0
#: How often the engines are asked whether a trial left by a dead driver still runs (seconds).
ENGINES_SECONDS = 1.0
#: A trial left running by a dead driver (it ran on the engines; Optuna was never told).
ENDED = "ENDED"

NO_SUCH_STUDY = ("no study {name!r} in {parent} (no {file} there); give the folder the search was "
                 "started with ({storage}), or list it with `ls {parent}`")
NOT_DRIVEN = ("search {name!r} has no kernel driving it: {who}{left}; continue it with "
              "`%jax_tune FUNC --space EXPR --name {name}{storage} --resume`")
DRIVEN = ("search {name!r} is driven by the kernel {who}, which this kernel only follows; stop "
          "it there (its TuneResult's stop(), or the view's Stop search button)")
LEFT = {"counted": ", and its trial {n} ran on the engines to its end ({metric} {value:.5g}): a "
                     "resume counts it",
        "again": ", and its trial {n} {how} (a resume runs it again)"}


def is_study(folder: str) -> bool:
    """Whether ``folder`` holds a search's study (not a training run)."""
    return os.path.isfile(os.path.join(folder, JOURNAL))


def driver(study: Any) -> tuple[bool, str]:
    """Whether a live kernel drives the search of ``study``, and who (or who did)."""
    lease = Lease.of(study)
    if lease is None:
        return False, "no kernel ever took it (a study from an older jaxnb)"
    who = f"pid {lease.pid} on {lease.host}"
    here = lease.host == socket.gethostname()
    if lease.until <= 0:
        return False, f"the kernel that ran it ({who}) let it go"
    if (here and not _pid_runs(lease.pid)) or lease.until <= time.time():
        return False, f"the kernel that ran it ({who}) is gone"
    return True, who


def follow(folder: str, name: str, show: bool, busy: Any = None, storage: str = "",
           stop_trial: Any = None) -> TuneResult:
    """The live ``TuneResult`` of the search in ``folder``: every trial since it began, then its
    end. ``show``: the search's live view. ``busy()``: whether the engines still run a request
    (a trial left by a dead driver ends when they do not). ``storage``: for the resume hint.
    ``stop_trial()``: ends the trial going on (the result's ``stop()`` when no kernel drives the
    search; a search a live kernel drives is stopped there)."""
    if not is_study(folder):
        parent = os.path.dirname(folder)
        raise FileNotFoundError(NO_SUCH_STUDY.format(name=name, parent=parent, file=JOURNAL,
                                                     storage=example("storage", "DIR")))
    study = load(folder, name)
    info = search_info.read(study)
    metric = str(info.get("metric") or DEFAULT_METRIC)
    mode = "min" if study.direction.name == "MINIMIZE" else "max"  # as the study was made
    result = TuneResult(study, folder, metric, mode)
    asked = info.get("trials")
    trials = asked if isinstance(asked, int) else len(study.trials)
    view = TuneView(name, metric, mode, trials) if show else None
    follower = Follower(result, view, info.get("config"), busy, storage)
    result.set_stopper(lambda: follower.stop(stop_trial))
    if view is not None:
        view.show()  # first: what the first look concludes updates it
    follower.step()
    if result.running:
        threading.Thread(target=contextvars.copy_context().run, args=(follower.loop,),
                         name=f"jaxnb-follow-{name}", daemon=True).start()
    return result


def load(folder: str, name: str) -> Any:
    """Study ``name`` from its journal in ``folder`` (read; nothing is written to it)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(os.path.join(folder, JOURNAL)))
    return optuna.load_study(study_name=name, storage=storage)


class Follower:
    """Applies what the study and the running trial's reports say since the last look."""

    def __init__(self, result: TuneResult, view: TuneView | None, base: Any, busy: Any = None,
                 storage: str = "") -> None:
        self.result, self.view, self.busy, self.storage = result, view, busy, storage
        self.base = base if isinstance(base, dict) else None
        self.done: set[int] = set()
        self.tails: dict[int, _Trial] = {}
        self.finished_at: dict[int, float] = {}
        self.asked_engines = 0.0

    def loop(self) -> None:
        while self.result.running:
            time.sleep(POLL_SECONDS)
            try:
                self.step()
            except Exception as exc:  # the folder went away: end, saying why
                self._conclude(f"could not read the study any more: {exc}", "failed")

    def step(self) -> None:
        """Read the study and the running trials' reports; conclude when the search is over."""
        from optuna.trial import TrialState

        study, now = self.result.study, time.monotonic()
        for t in study.get_trials(deepcopy=False):
            if t.number in self.done:
                continue
            if t.state == TrialState.RUNNING:
                self._running(t)
            elif t.state != TrialState.WAITING:
                self._finished(t, now)
        live, who = driver(study)
        if live:
            return
        info = search_info.read(study)
        if any(not trial.ended for trial in self.tails.values()) and self._engines_busy(now):
            return  # a trial its dead driver started still runs on the engines: to its end
        if info.get("status", search_info.RUNNING) != search_info.RUNNING and not self.tails:
            self._conclude(info.get("message") or None, str(info["status"]))
            return
        if self.finished_at:  # a trial told just now: its record is on its way
            return
        for number, trial in sorted(self.tails.items()):
            trial.read(number, self.result.metric, self.view)  # what came in meanwhile
            if self.view is not None:
                self.view.trial_ended(number, ENDED, trial.last)
        left = "".join(self.tails[n].left(n, self.result.metric) for n in sorted(self.tails))
        storage = f" --storage {self.storage}" if self.storage else ""
        self._conclude(NOT_DRIVEN.format(name=study.study_name, who=who, left=left,
                                         storage=storage), "stopped")

    def stop(self, stop_trial: Any) -> None:
        """``stop()``: a search a live kernel drives is refused in one line (stop it there);
        else the trial left running on the engines ends at its next report."""
        live, who = driver(self.result.study)
        if live:
            raise ClusterStateError(DRIVEN.format(name=self.result.study.study_name, who=who))
        if stop_trial is not None and any(not t.ended for t in self.tails.values()):
            stop_trial()

    def _running(self, t: Any) -> None:
        trial = self.tails.get(t.number)
        if trial is None:
            trial = self.tails[t.number] = _Trial(run_reports.Tail(run_reports.path(run_of(
                t, self.result.path))))
            if self.view is not None:
                self.view.trial_started(t.number, dict(t.params))
        trial.read(t.number, self.result.metric, self.view)

    def _finished(self, t: Any, now: float) -> None:
        if t.number in self.tails:  # the reports that came in before it was told
            self.tails[t.number].read(t.number, self.result.metric, None)
        if not os.path.exists(os.path.join(run_of(t, self.result.path), trial_record.FILE)) and (
                t.number in self.tails or _just_told(t)):  # its record is on its way
            first = self.finished_at.setdefault(t.number, now)
            if now - first < RECORD_SECONDS:
                return
        trial, params = past_trial(t, self.result.path, self.result.metric, self.base)
        self.finished_at.pop(t.number, None)
        self.tails.pop(t.number, None)
        self.done.add(t.number)
        self.result.trials.append(trial)
        if self.view is not None:
            show_past(self.view, trial, params, self.result.metric)

    def _engines_busy(self, now: float) -> bool:
        """Whether the engines still run (a trial left by a dead driver), asked once a second."""
        if self.busy is None or now - self.asked_engines < ENGINES_SECONDS:
            return self.busy is not None
        self.asked_engines = now
        try:
            return bool(self.busy())
        except Exception:  # the cluster is gone: nothing runs there
            return False

    def _conclude(self, why: str | None, status: str) -> None:
        result = self.result
        result.trials.sort(key=lambda t: t.number)
        result.stopped_because = why
        if self.view is not None:
            with contextlib.suppress(Exception):  # a drawing problem must not hold the result
                self.view.finish(status, why or "")
        result.set_done()


class _Trial:
    """A running trial's reports, read from its run folder."""

    def __init__(self, tail: run_reports.Tail) -> None:
        self.tail = tail
        self.ended = False
        self.failed = False  # its end says it raised, or was stopped
        self.last: float | None = None
        self.recoveries = 0
        self.started = False

    def read(self, number: int, metric: str, view: TuneView | None) -> None:
        for event in self.tail.read():
            kind = event.get("kind")
            if kind == "start":
                self.ended = False
                if self.started and view is not None:  # a recovery: from its checkpoint
                    self.recoveries += 1
                    resume = event.get("resume")
                    view.rewind(number, resume if isinstance(resume, int) else None, self.recoveries)
                self.started = True
            elif kind == "report" and isinstance(event.get("step"), int):
                metrics = event.get("metrics")
                value = metric_value(metrics if isinstance(metrics, dict) else {}, metric)
                if view is not None:
                    view.saw_step(number, event["step"])
                    if value is not None:
                        view.add(number, event["step"], value)
                if value is not None:
                    self.last = value
            elif kind == "end" and event.get("resized_at") is None:
                self.ended = True
                self.failed = bool(event.get("error") or event.get("stopped"))
        if view is not None:
            view.refresh()

    def left(self, number: int, metric: str) -> str:
        """What became of this trial, whose driver died (as ``--resume`` will take it)."""
        if self.ended and not self.failed and self.last is not None and self.last == self.last:
            return LEFT["counted"].format(n=number, metric=metric, value=self.last)
        how = ("ended without a value to count" if self.ended else
               "did not reach its end")
        return LEFT["again"].format(n=number, how=how)


def _just_told(t: Any) -> bool:
    """Whether Optuna was told trial ``t``'s end moments ago (the search writes its record
    just after; a trial lost with its kernel has none and is not waited for)."""
    import datetime

    done = t.datetime_complete
    return done is not None and (datetime.datetime.now() - done).total_seconds() < RECORD_SECONDS


def _pid_runs(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid)
