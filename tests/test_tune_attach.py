"""A search followed from its study folder by a kernel that attached (``%jax_tune --attach``,
``cluster.result(STUDY)``), as files: a real Optuna journal, ``trial.json`` and ``reports.jsonl``
written as the search and the engines write them, the lease as a live or a dead kernel left it.
No engines (those are in ``test_tune_attach_kernels.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import optuna
import pytest

from jaxnb._core import run_reports
from jaxnb._engine.run.journal import Journal
from jaxnb._train.result import Result
from jaxnb._tune import attached, lease, search_info, trial_record
from jaxnb._tune import study as studies
from jaxnb._tune.past import past_trials, trial_run_name
from jaxnb._tune.result import TrialResult
from jaxnb._tune.study import JOURNAL

optuna.logging.set_verbosity(optuna.logging.WARNING)


def a_study(folder) -> optuna.Study:
    os.makedirs(folder, exist_ok=True)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / JOURNAL)))
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    search_info.started(study, "acc", "max", 3, {"steps": 4})
    return study


def driven_by(study, pid: int, until: float) -> None:
    study.set_user_attr(lease.KEY, {"owner": "o", "host": socket.gethostname(), "pid": pid,
                                    "until": until})


def reports(folder, number: int, steps: range, end: bool, resume: int | None = None) -> None:
    journal = Journal(str(folder / trial_run_name(number)), "id", resume)
    journal.reports([{"process": 0, "seq": s, "step": s, "time": 1.0, "metrics": {"acc": s / 10}}
                     for s in steps])
    if end:
        journal.end({"error": None, "stopped": False})


def finish(study, folder, trial, steps: range) -> None:
    """What the search does at a trial's end: tell Optuna, then write its record."""
    study.tell(trial, steps[-1] / 10)
    run = Result(trial_run_name(trial.number), str(folder / trial_run_name(trial.number)))
    for s in steps:
        run.add_report({"acc": s / 10}, s)
    done = TrialResult.of(run, trial.number, {"steps": 4, **trial.params}, "COMPLETE", steps[-1] / 10)
    done.seconds = 1.5
    trial_record.write(done, trial.params)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_search_is_followed_trial_by_trial_to_its_end(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    driven_by(study, os.getpid(), time.time() + 60)
    first = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 5), end=True)
    finish(study, folder, first, range(1, 5))
    second = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 1, range(1, 3), end=False)

    result = attached.follow(str(folder), "s", show=False)
    assert result.running and (result.metric, result.mode) == ("acc", "max")
    assert [t.number for t in result.trials] == [0]
    assert result.trials[0].steps == [1, 2, 3, 4] and result.trials[0].seconds == 1.5
    assert result.trials[0].config["x"] == first.params["x"] and result.trials[0].config["steps"] == 4

    reports(folder, 1, range(3, 7), end=True)
    finish(study, folder, second, range(1, 7))
    time.sleep(0.3)
    assert result.running  # the driver lives and has not said it ended
    search_info.ended(study, "finished", "")
    driven_by(study, os.getpid(), 0.0)  # the lease given back, as at a search's end
    result.wait(5)
    assert [(t.number, t.state, t.value) for t in result.trials] == [(0, "COMPLETE", 0.4),
                                                                    (1, "COMPLETE", 0.6)]
    assert result.stopped_because is None and result.best_result.number == 1


def test_a_search_whose_kernel_died_ends_in_one_line_once_its_trial_ended_on_the_engines(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    driven_by(study, dead_pid(), time.time() + 60)  # the lease has not run out: the pid tells
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 3), end=False)
    running = [True]

    result = attached.follow(str(folder), "s", show=False, busy=lambda: running[0],
                             storage="/runs")
    time.sleep(0.5)
    assert result.running  # the engines still run trial 0
    reports(folder, 0, range(3, 5), end=True)
    running[0] = False
    result.wait(5)
    assert result.trials == []  # Optuna was never told
    why = result.stopped_because
    assert why.startswith("search 's' has no kernel driving it: the kernel that ran it (pid "), why
    assert "is gone, and its trial 0 ran on the engines to its end (acc 0.4): a resume counts it;" in why
    assert why.endswith("continue it with `%jax_tune FUNC --space EXPR --name s --storage /runs "
                        "--resume`") and "\n" not in why


def test_a_trial_whose_end_is_in_its_folder_needs_no_engines_to_answer(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    driven_by(study, os.getpid(), time.time() - 1)  # a lease that ran out (another machine's)
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 4), end=True)
    result = attached.follow(str(folder), "s", show=False, busy=lambda: True)
    assert not result.running and "its trial 0 ran on the engines to its end (acc 0.3)" in (
        result.stopped_because)


def test_a_trial_that_did_not_end_is_run_again(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    driven_by(study, dead_pid(), time.time() + 60)
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 4), end=False)  # the cluster stopped under it
    result = attached.follow(str(folder), "s", show=False, busy=lambda: False)
    assert "its trial 0 did not reach its end (a resume runs it again)" in result.stopped_because


def test_resume_counts_a_trial_that_ended_well_on_the_engines_and_runs_a_failed_one_again(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    distribution = {"x": optuna.distributions.FloatDistribution(0, 1)}
    ran = study.ask(distribution)
    reports(folder, 0, range(1, 6), end=True)
    failed = study.ask(distribution)
    journal = Journal(str(folder / trial_run_name(1)), "id", None)
    journal.end({"error": "ValueError: x", "stopped": False})
    driven_by(study, dead_pid(), time.time() + 60)  # both left RUNNING by a kernel now gone

    opened = studies.open_study(str(folder), "s", "maximize", None, None, True, metric="acc",
                                base={"steps": 4})
    try:
        assert (opened.told, opened.requeued, opened.done) == ([0], [1], 1)
        trials = opened.study.get_trials(deepcopy=False)
        assert [(t.number, t.state.name) for t in trials] == [(0, "COMPLETE"), (1, "FAIL"),
                                                             (2, "WAITING")]
        assert trials[0].value == 0.5 and trials[2].system_attrs["fixed_params"] == failed.params
        past = past_trials(opened.study, str(folder), "acc", {"steps": 4})
        assert past[0][0].steps == [1, 2, 3, 4, 5]  # its whole curve, from its folder
        assert past[0][0].config == {"steps": 4, **ran.params}
    finally:
        opened.hold.release()


def test_a_search_that_ended_cleanly_is_read_whole_at_once(tmp_path):
    folder = tmp_path / "s"
    study = a_study(folder)
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 3), end=True)
    finish(study, folder, trial, range(1, 3))
    search_info.ended(study, "finished", "stopped on request after trial 0")
    driven_by(study, os.getpid(), 0.0)
    result = attached.follow(str(folder), "s", show=False)
    assert not result.running and [t.value for t in result.trials] == [0.2]
    assert result.stopped_because == "stopped on request after trial 0"


def test_no_study_is_one_line_naming_the_folder(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match=rf"^no study 'run' in {tmp_path} \(no study.journal "
                                                r"there\); give the folder .*storage.*ls "):
        attached.follow(str(tmp_path / "run"), "run", show=False)
    assert not attached.is_study(str(tmp_path / "run"))


def test_what_the_search_records_of_itself_is_json(tmp_path):
    study = a_study(tmp_path / "s")
    search_info.started(study, "loss", "min", 5, {"f": len})  # a config JSON cannot hold
    assert search_info.read(study)["config"] is None
    search_info.started(study, "loss", "min", 5, {"lr": 0.1})
    search_info.ended(study, "failed", "why")
    info = search_info.read(study)
    assert (info["trials"], info["config"], info["status"], info["message"]) == (5, {"lr": 0.1},
                                                                                "failed", "why")
    assert run_reports.REPORTS_FILE == "reports.jsonl"


def test_stop_of_a_followed_search_names_the_kernel_that_drives_it_or_ends_the_orphan_trial(
        tmp_path):
    from jaxnb import ClusterStateError

    folder = tmp_path / "s"
    study = a_study(folder)
    driven_by(study, os.getpid(), time.time() + 60)
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    reports(folder, 0, range(1, 3), end=False)
    stopped = []
    result = attached.follow(str(folder), "s", show=False, busy=lambda: True,
                             stop_trial=lambda: stopped.append(True))
    with pytest.raises(ClusterStateError, match=rf"^search 's' is driven by the kernel pid "
                                                rf"{os.getpid()} on .*; stop it there \(its "):
        result.stop()
    assert stopped == [] and result.running
    driven_by(study, dead_pid(), time.time() + 60)  # its kernel dies: the trial runs on
    result.stop()
    assert stopped == [True]  # asked of the engines (they end it at its next report)
    reports(folder, 0, range(3, 4), end=True)
    result.wait(5)


def test_a_trial_lost_with_its_kernel_long_ago_is_not_waited_for(tmp_path, monkeypatch):
    """A trial a resume marked FAIL has no ``trial.json``: taken from Optuna's record at once (a
    trial told moments ago is waited for, its record being on its way)."""
    monkeypatch.setattr(attached, "RECORD_SECONDS", 0.5)
    folder = tmp_path / "s"
    study = a_study(folder)
    lost = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    study.tell(lost, state=optuna.trial.TrialState.FAIL)
    driven_by(study, os.getpid(), 0.0)
    search_info.ended(study, "finished", "")
    time.sleep(0.6)
    result = attached.follow(str(folder), "s", show=False)
    assert not result.running and [(t.number, t.state) for t in result.trials] == [(0, "FAIL")]
