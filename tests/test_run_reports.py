"""The run folder's record of a run (``reports.jsonl``): process 0's writer on the engines and
the reader of a kernel that attaches later, as files (no engines: the writer's own class)."""

from __future__ import annotations

import json
import os
import time

import pytest

from jaxnb._core import run_reports
from jaxnb._core.safe_files import LinkRefusedError
from jaxnb._engine.run.journal import Journal
from jaxnb._train import followed


def record(step: int, checkpoint: str | None = None) -> dict:
    return {"process": 0, "seq": step - 1, "step": step, "time": 1.0 * step,
            "metrics": {"loss": 1.0 / step, "step": step}, "checkpoint": checkpoint}


def attempt(run_dir: str, steps: range, resume: int | None, end: dict | None,
            recovers: bool = False) -> None:
    journal = Journal(run_dir, "id", resume, recovers)
    journal.reports([record(s, f"/ckpt/{s}" if s % 5 == 0 else None) for s in steps])
    if end is not None:
        journal.end(end)


def test_a_finished_run_is_read_whole_with_its_checkpoint(tmp_path):
    attempt(str(tmp_path), range(1, 8), None, {"error": None, "stopped": False})
    result = followed.follow(None, str(tmp_path), "r", None)  # type: ignore[arg-type]
    assert not result.running and result.error is None and not result.stopped
    assert result.steps == list(range(1, 8))
    assert [m["loss"] for m in result.history] == [1.0 / s for s in range(1, 8)]
    assert (result.checkpoint.step, result.checkpoint.path) == (5, "/ckpt/5")


def test_a_recovery_replaces_the_reports_after_the_checkpoint_and_a_resize_is_no_end(tmp_path):
    run = str(tmp_path)
    attempt(run, range(1, 8), None, {"error": "RuntimeError: lost", "stopped": False})
    attempt(run, range(6, 9), 5, {"error": None, "stopped": False, "resized_at": 8})
    result = followed.follow(None, run, "r", None)  # type: ignore[arg-type]
    assert result.running  # the last attempt ended for a size change: the run goes on
    attempt(run, range(9, 11), 8, {"error": None, "stopped": True, "stopped_at": 10})
    result.wait(5)
    assert result.steps == list(range(1, 11))
    assert result.stopped and result.stopped_at == 10 and result.error is None


def test_a_fresh_run_in_a_reused_folder_forgets_the_earlier_one_and_its_error_is_one_line(tmp_path):
    run = str(tmp_path)
    attempt(run, range(1, 4), None, {"error": None, "stopped": False})
    attempt(run, range(1, 3), None, None)  # the new run, still going
    result = followed.follow(None, run, "r", None)  # type: ignore[arg-type]
    assert result.running and result.steps == [1, 2]
    with open(run_reports.path(run), "a") as f:  # a line cut by a crash, then the end
        f.write('{"kind": "rep\n' + json.dumps({"kind": "end", "error": "ValueError: bad"}) + "\n")
    result.wait(5)
    assert result.steps == [1, 2]
    assert str(result.error) == "run 'r' failed on process 0: ValueError: bad"


def test_no_such_run_is_one_line_naming_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        followed.follow(None, str(tmp_path / "nope"), "nope", None)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "no run 'nope' in " + str(tmp_path) in text and len(text.splitlines()) == 1


def test_the_writer_refuses_a_link_planted_at_the_file(tmp_path):
    target = tmp_path / "theirs"
    target.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(target, run / run_reports.REPORTS_FILE)
    with pytest.raises(LinkRefusedError):
        Journal(str(run), "id", None)
    assert target.read_text() == "keep"


def test_odd_metric_values_are_written_as_json_never_pickle(tmp_path):
    journal = Journal(str(tmp_path), "id", None)
    journal.reports([{**record(1), "metrics": {"obj": object(), 3: 1.5}},
                     {**record(2), "metrics": {("a", "b"): 2.5}}])
    journal.end({"error": None})
    with open(run_reports.path(str(tmp_path))) as f:
        lines = [json.loads(x) for x in f]
    assert lines[1]["metrics"]["3"] == 1.5 and lines[1]["metrics"]["obj"].startswith("<object")
    assert lines[2]["metrics"] == {"('a', 'b')": "2.5"} and lines[3]["kind"] == "end"


def test_a_run_that_recovers_ends_only_at_its_drivers_end_with_every_failure(tmp_path):
    from jaxnb._train import run_events
    from jaxnb._train.result import Failure

    run = str(tmp_path)
    attempt(run, range(1, 8), None, {"error": "XlaRuntimeError: peer gone", "stopped": False},
            recovers=True)  # its peer died
    result = followed.follow(None, run, "r", None)  # type: ignore[arg-type]
    assert result.running  # process 0's end of a run that recovers is not the run's end
    lost = Failure(time=12.5, step=7, processes=(1,), cause="[p1] (pid 9 on vm) exited",
                   resumed_from=5, phases={"replay": 0.25})
    run_events.append(run, run_events.failure_event(lost))
    attempt(run, range(6, 11), 5, {"error": None, "stopped": False}, recovers=True)
    time.sleep(0.3)  # read by then (it is read every 0.05 s)
    assert result.running and result.failures == [lost]  # its driver has not said yet
    run_events.append(run, run_events.final_end(None))
    result.wait(5)
    assert not result.running and result.error is None and result.steps == list(range(1, 11))
    assert result.failures[0].phases == {"replay": 0.25} and run_events.failures_in(run) == [lost]


def test_a_drivers_end_is_the_error_and_a_hostile_failure_line_is_skipped(tmp_path):
    from jaxnb._train import run_events

    run = str(tmp_path)
    Journal(run, "id", None, recovers=True)
    with open(run_reports.path(run), "a") as f:  # written by anyone who can write the folder
        for odd in ({"kind": "failure", "time": "x", "step": 1, "processes": [1], "cause": "c"},
                    {"kind": "failure", "time": 1, "step": [1], "processes": [1], "cause": "c"},
                    {"kind": "failure", "time": 1, "step": 1, "processes": 1, "cause": "c"},
                    {"kind": "failure", "__reduce__": "os.system", "time": 1, "step": 1,
                     "processes": [], "cause": "c", "phases": {"a": "b"}}):
            f.write(json.dumps(odd) + "\n")
    run_events.append(run, run_events.final_end("[p1] exited; gave up after 1 recovery"))
    result = followed.follow(None, run, "r", None)  # type: ignore[arg-type]
    assert result.failures == [] and run_events.failures_in(run) == []
    assert str(result.error) == "run 'r' failed: [p1] exited; gave up after 1 recovery"
