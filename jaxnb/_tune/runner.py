"""The search loop: ask Optuna for a trial, train it on the whole cluster, tell Optuna how it ended."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from typing import Any

from jaxnb._core.errors import ClusterStateError, RemoteError
from jaxnb._core.spelling import bare, example, option
from jaxnb._core.state import Group
from jaxnb._failures import detect
from jaxnb._train import driver, function
from jaxnb._train.recovery import Restart
from jaxnb._train.result import Result
from jaxnb._tune import keys, lease, search_info, trial_record
from jaxnb._tune import space as spaces
from jaxnb._tune import study as studies
from jaxnb._tune.feed import TrialFeed
from jaxnb._tune.options import TuneOptions, make_pruner
from jaxnb._tune.past import past_trials, show_past, trial_run_name
from jaxnb._tune.result import TrialResult, TuneResult
from jaxnb._tune.view import TuneView

NO_METRIC = ("no report of trial {n} carries metric {metric!r} (its reports have: {have}); "
             "pass {option} with one of them")
NO_REPORT = ("trial {n} made no report; call jaxnb.report({{{metric!r}: value}}) in the train "
             "function, or pass {example}")
UNREAD = ("jaxnb: the search samples {keys} but {fn} never reads {them} (no such string in its "
          "code); check {space} against the config keys {fn} uses")
CANNOT_GO_ON = "the cluster cannot run more trials: {why}"
STOPPED = "stopped on request after trial {n}"


def tune(group: Group, fn: Any, space: Any, opts: TuneOptions, *, on_result: Any = None,
         restart: Restart | None = None) -> TuneResult:
    """Run the search (see ``jaxnb.tune.run``); ``on_result`` gets the TuneResult before an error.

    ``restart`` restarts the cluster and replays its setup: a trial run with
    ``max_failures`` recovers through it (as ``JaxCluster.train`` does)."""
    sample = spaces.sampler(space)
    preview = spaces.check(sample)
    import optuna

    name = function.run_name(fn, opts.name)
    folder = os.path.abspath(os.path.join(os.fspath(opts.storage or driver.DEFAULT_STORAGE), name))
    missing = keys.unread(fn, preview)
    if missing:
        print(UNREAD.format(keys=", ".join(map(repr, missing)), fn=function.label_of(fn),
                            space=bare("space"), them="it" if len(missing) == 1 else "them"),
              file=sys.stderr)
    if opts.break_lock:
        lease.break_lock(folder)
    opened = studies.open_study(folder, name, opts.direction, make_pruner(opts.pruner),
                                optuna.samplers.TPESampler(seed=opts.seed), opts.resume,
                                metric=opts.metric, base=opts.config)
    try:  # the study is this search's until it ends (one live search per study)
        result = TuneResult(opened.study, folder, opts.metric, opts.mode)
        search = _Search(group, fn, sample, opts, result, restart)
        if opts.background:
            result.set_stopper(search.request_stop)
            result.set_view(search.view)
            follow = contextvars.copy_context().run  # output goes to the cell that started it
            threading.Thread(target=follow, args=(_in_background, search, opened, on_result),
                             name=f"jaxnb-tune-{name}", daemon=True).start()
            return result
    except BaseException:
        opened.hold.release()
        raise
    try:
        search.run(opened)
    finally:
        opened.hold.release()
        result.set_done()
        if on_result is not None:
            on_result(result)
    return result


def _in_background(search: _Search, opened: studies.Opened, on_result: Any) -> None:
    try:
        search.run(opened)
    except Exception as exc:  # the thread always ends the search
        print(f"jaxnb: background search {search.study.study_name!r} failed: "
              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
    finally:
        opened.hold.release()
        search.result.set_done()
        if on_result is not None:
            on_result(search.result)


class _Search:
    def __init__(self, group: Group, fn: Any, sample: Any, opts: TuneOptions,
                 result: TuneResult, restart: Restart | None) -> None:
        self.group, self.fn, self.sample, self.opts, self.result = group, fn, sample, opts, result
        self.study = result.study
        self.stop_requested = False
        # Stop only in the background: while a cell runs, the kernel takes no widget clicks (as
        # for a blocking %jax_train); interrupting the kernel stops the current trial and the search.
        on_stop = self.request_stop if opts.background else None
        self.view = (TuneView(self.study.study_name, opts.metric, opts.mode, opts.trials,
                              on_stop=on_stop) if opts.show else None)
        # Each trial's run: its datasets, and recovery as for %jax_train --max-failures.
        self.extra: dict[str, Any] = {"datasets": opts.datasets, "max_failures": opts.max_failures,
                      "keep_checkpoints": opts.keep_checkpoints, "restart": restart}
        self._started = time.monotonic()

    def request_stop(self) -> None:
        """End the search after the current trial."""
        self.stop_requested = True
        if self.view is not None and self.view.status == "running":
            self.view.set_status("stopping", "the search ends after the current trial")

    def run(self, opened: studies.Opened) -> None:
        opts = self.opts
        search_info.started(self.study, opts.metric, opts.mode, opts.trials, opts.config)
        for past, params in past_trials(self.study, self.result.path, self.opts.metric,
                                         self.opts.config):
            self.result.trials.append(past)
            if self.view is not None:
                show_past(self.view, past, params, opts.metric)
        if self.view is not None:
            self.view.show()
        status, message, first = "finished", "", True
        try:
            while studies.counted(self.study) < self.opts.trials:
                lost = opened.hold.taken_over()
                if lost:
                    status, message = "failed", lost
                    self.result.stopped_because = lost
                    break
                if self.stop_requested:
                    done = self.result.trials
                    message = STOPPED.format(n=done[-1].number) if done else "stopped on request"
                    self.result.stopped_because = message
                    break
                why = self._one_trial(first)
                first = False
                if why:
                    status = "finished" if why.startswith("stopped") else "failed"
                    message = why
                    self.result.stopped_because = why
                    break
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self._finish(status, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            raise
        self._finish(status, message)

    def _finish(self, status: str, message: str) -> None:
        with contextlib.suppress(Exception):  # the journal could not be written: the lease tells
            search_info.ended(self.study, status, message)
        if self.view is not None:
            self.view.finish(status, message)

    def _one_trial(self, first: bool) -> str | None:
        """Run one trial; why the search cannot go on, or None."""
        from optuna.trial import TrialState

        trial = self.study.ask()
        try:
            return self._run_trial(trial, first)
        except BaseException:  # an interrupt between two steps of ours: never left RUNNING
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            raise

    def _run_trial(self, trial: Any, first: bool) -> str | None:
        from optuna.trial import TrialState

        params = self.sample(trial)
        config = {**(self.opts.config or {}), **params}
        run_name = trial_run_name(trial.number)
        trial.set_user_attr("run", run_name)
        if self.view is not None:
            self.view.trial_started(trial.number, params)
        feed = TrialFeed(trial, self.opts.metric, self.view, self._stop_current)
        run: Result | None = None
        error: BaseException | None = None
        self._started = time.monotonic()
        try:
            run = driver.train(self.group, self.fn, config, name=run_name, storage=self.result.path,
                               total_steps=self.opts.steps, view=feed, **self.extra)
        except RemoteError as exc:
            error = exc
            run = getattr(exc, "result", None)
        except BaseException as exc:  # could not start (busy, bad function) or interrupted
            self.study.tell(trial, state=TrialState.FAIL)
            self._record(trial.number, Result(run_name, os.path.join(self.result.path, run_name),
                                              error=exc if isinstance(exc, Exception) else None),
                         params, "FAIL", None)
            if isinstance(exc, ClusterStateError):
                return CANNOT_GO_ON.format(why=str(exc).splitlines()[0])
            raise
        assert run is not None
        state, why = self._conclude(trial, feed, run, error, first)
        self._record(trial.number, run, params, state, feed.last, pruned=feed)
        if error is not None:
            print(f"jaxnb: trial {trial.number} failed: {getattr(error, 'summary', error)}",
                  file=sys.stderr)
            dead = detect.dead_processes(self.group)
            if dead:
                return CANNOT_GO_ON.format(why=f"processes {sorted(dead)} died; restart the "
                                           f"cluster and continue with {example('resume', True)}")
        return why

    def _conclude(self, trial: Any, feed: TrialFeed, run: Result, error: BaseException | None,
                  first: bool) -> tuple[str, str | None]:
        """Tell Optuna how the trial ended: its state, and why the search must end (or None)."""
        from optuna.trial import TrialState

        if error is not None:
            self.study.tell(trial, state=TrialState.FAIL)
            return "FAIL", None
        if feed.pruned:
            self.study.tell(trial, state=TrialState.PRUNED)
            return "PRUNED", None
        if run.stopped:  # the user stopped this trial (kernel interrupt): the search ends too
            self.study.tell(trial, state=TrialState.FAIL)
            return "FAIL", STOPPED.format(n=trial.number)
        if feed.last is None:
            self.study.tell(trial, state=TrialState.FAIL)
            if first or not feed.reports:
                have = ", ".join(sorted(feed.keys)) or "nothing"
                text = (NO_METRIC.format(n=trial.number, metric=self.opts.metric, have=have,
                                         option=option("metric"))
                        if feed.reports else NO_REPORT.format(n=trial.number, metric=self.opts.metric,
                                                              example=example("metric", "NAME")))
                raise ValueError(text)
            return "FAIL", None
        if feed.last != feed.last:  # NaN: Optuna fails the trial
            self.study.tell(trial, state=TrialState.FAIL)
            return "FAIL", None
        self.study.tell(trial, feed.last)
        return "COMPLETE", None

    def _record(self, number: int, run: Result, params: dict[str, Any], state: str,
                value: float | None, pruned: TrialFeed | None = None) -> None:
        trial = TrialResult.of(run, number, {**(self.opts.config or {}), **params}, state, value)
        trial.seconds = time.monotonic() - self._started
        if state == "PRUNED" and pruned is not None:
            trial.pruned_at, trial.pruned_time = pruned.pruned_at, pruned.pruned_time
        trial_record.write(trial, params)  # a resumed search shows this trial as it is now
        self.result.trials.append(trial)
        if self.view is not None:
            self.view.trial_ended(number, state, value, seconds=trial.seconds)  # as a resume shows it

    def _stop_current(self) -> None:
        monitor = self.group.current_run
        if monitor is not None:
            monitor.request_stop()
