"""A finished trial's record (``trial_NNNN/trial.json``): read back as it was written; anything
else is not taken for one."""

from __future__ import annotations

import json
import math

import pytest

from jaxnb._train.result import Result
from jaxnb._tune import trial_record
from jaxnb._tune.result import TrialResult


def finished(tmp_path, state="PRUNED") -> TrialResult:
    run = Result("trial_0003", str(tmp_path / "trial_0003"))
    for step, loss in ((1, 0.5), (2, 0.4), (2, float("nan")), (5, 0.3)):
        run.add_report({"loss": loss, "note": "text", "vec": [1, 2]}, step)
    run.stopped, run.stopped_at = True, 5
    trial = TrialResult.of(run, 3, {"steps": 9, "x": 8.5}, state, 0.3)
    trial.seconds, trial.pruned_at, trial.pruned_time = 1.25, 2, 1_800_000_000.5
    return trial


def read(tmp_path, number=3, base=None):
    run = Result("trial_0003", str(tmp_path / "trial_0003"))
    return trial_record.read(run, number, base if base is not None else {"steps": 9})


def test_a_trial_reads_back_as_it_was_written(tmp_path):
    trial = finished(tmp_path)
    trial_record.write(trial, {"x": 8.5})
    back, params = read(tmp_path)
    assert params == {"x": 8.5} and back.config == trial.config
    assert (back.state, back.value, back.seconds, back.pruned_at, back.pruned_time, back.stopped,
            back.stopped_at) == ("PRUNED", 0.3, 1.25, 2, 1_800_000_000.5, True, 5)
    assert back.steps == [1, 2, 2, 5] and back.history[0] == trial.history[0]
    assert math.isnan(back.history[2]["loss"]) and back.metrics == trial.metrics


@pytest.mark.parametrize("damage", [
    lambda doc: doc.update(number=4),  # another trial's
    lambda doc: doc.update(version=99),
    lambda doc: doc.update(state="RUNNING"),
    lambda doc: doc["steps"].pop(),  # steps and history out of step
    lambda doc: doc.update(steps=["1", 2, 2, 5]),
    lambda doc: doc.update(params=[1]),
])
def test_a_record_that_does_not_fit_is_not_taken(tmp_path, damage):
    trial_record.write(finished(tmp_path), {"x": 8.5})
    path = tmp_path / "trial_0003" / trial_record.FILE
    doc = json.loads(path.read_text())
    damage(doc)
    path.write_text(json.dumps(doc))
    assert read(tmp_path) is None


def test_no_record_or_a_broken_one_is_none(tmp_path):
    assert read(tmp_path) is None
    (tmp_path / "trial_0003").mkdir()
    (tmp_path / "trial_0003" / trial_record.FILE).write_text("{not json")
    assert read(tmp_path) is None


def test_a_failed_write_is_a_warning(tmp_path, capsys):
    trial = finished(tmp_path)
    (tmp_path / "trial_0003").write_text("a file where the folder goes")
    trial_record.write(trial, {"x": 8.5})
    assert "could not save trial 3's record" in capsys.readouterr().err
