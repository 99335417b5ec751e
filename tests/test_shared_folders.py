"""Files jaxnb writes in a shared run folder or study: a planted link is refused in one line
that names it, and nothing outside the folder is written (``jaxnb._core.safe_files``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.other_user import other_user_fixture, owned_by, run_as, shared_folder_fixture  # noqa: F401

from jaxnb._core import run_folder, safe_files
from jaxnb._core.file_lock import FileLock
from jaxnb._engine.datasets.data_run import DataRun
from jaxnb._train.result import Result
from jaxnb._tune import trial_record
from jaxnb._tune.result import TrialResult

MINE = "the victim's own file\n"

#: What the victim's kernel and engines do in the shared run folder, as that user.
VICTIM = r"""
import sys
from jaxnb._core import run_folder
from jaxnb._engine.datasets.data_run import DataRun
run = sys.argv[1]
for label, write in (("lock", lambda: run_folder.hold(run)),
                     ("user", lambda: run_folder.remember_user_checkpoint(run, 3, "/x")),
                     ("positions", lambda: DataRun({}, run, 0, 1, None).close())):
    try:
        write()
        print(label, "wrote")
    except OSError as exc:
        print(label, "refused", exc)
"""


def refusal(link: Path, target: Path) -> str:
    return (f"{link} is a symbolic link (to {target}): jaxnb does not write through links in a "
            f"run folder (anyone who can write {link.parent} could have planted it); remove it, "
            "or use a folder only you can write")


def test_links_planted_in_a_shared_run_folder_write_nothing_of_the_victims(other_user,
                                                                          shared_folder):
    """Root plants links where the victim's run writes; the victim (an unprivileged user) runs
    jaxnb there: every write is refused or lands in the folder, and the victim's file is kept."""
    victim = owned_by(other_user, shared_folder / "authorized_keys", 0o600, MINE)
    run = shared_folder / "runs" / "fit"
    (run / "datasets").mkdir(parents=True)
    for folder in (run.parent, run, run / "datasets"):
        folder.chmod(0o777)
    planted = [run / "run.lock", run / "user_checkpoint.json.tmp",
               run / "datasets" / "process_0.jsonl"]
    for link in planted:
        link.symlink_to(victim)
    done = run_as(other_user, VICTIM, str(run))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == MINE
    lines = done.stdout.splitlines()
    assert lines[0] == f"lock refused {refusal(run / 'run.lock', victim)}"
    assert lines[1] == "user wrote"  # beside the planted .tmp, in a fresh file of its own
    assert lines[2] == f"positions refused {refusal(run / 'datasets' / 'process_0.jsonl', victim)}"
    assert os.stat(run / "user_checkpoint.json").st_uid == other_user.pw_uid


def test_a_link_at_the_final_name_is_refused_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text(MINE)
    run = tmp_path / "run"
    run.mkdir()
    (run / "user_checkpoint.json").symlink_to(victim)
    with pytest.raises(safe_files.LinkRefusedError) as refused:
        run_folder.remember_user_checkpoint(str(run), 1, "/x")
    assert str(refused.value) == refusal(run / "user_checkpoint.json", victim)
    assert victim.read_text() == MINE and os.listdir(run) == ["user_checkpoint.json"]


def _run_with_linked(tmp_path, name):
    """A run folder whose ``name`` is a link to a folder elsewhere: (run, elsewhere)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(elsewhere)
    return run, elsewhere


def test_a_linked_datasets_folder_is_refused(tmp_path):
    run, elsewhere = _run_with_linked(tmp_path, "datasets")
    with pytest.raises(safe_files.LinkRefusedError) as refused:
        DataRun({}, str(run), 0, 1, None)
    assert str(refused.value) == refusal(run / "datasets", elsewhere)
    assert os.listdir(elsewhere) == []


def test_a_trial_record_through_a_link_is_a_warning_and_writes_nothing(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text(MINE)
    trial_dir = tmp_path / "study" / "trial_0001"
    trial_dir.mkdir(parents=True)
    (trial_dir / "trial.json").symlink_to(victim)
    (trial_dir / "trial.json.tmp").symlink_to(victim)
    trial = TrialResult.of(Result("trial_0001", str(trial_dir)), 1, {}, "COMPLETE", 0.5)
    trial_record.write(trial, {})
    assert victim.read_text() == MINE
    assert refusal(trial_dir / "trial.json", victim) in capsys.readouterr().err


def test_a_lock_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "run.lock")
    with pytest.raises(safe_files.LinkRefusedError, match=r"run.lock is not a regular file"):
        FileLock(str(tmp_path / "run.lock")).acquire()


def test_whole_writes_leave_no_temporary_behind(tmp_path):
    safe_files.write_whole(str(tmp_path / "a" / "b.json"), b"{}", within=str(tmp_path))
    safe_files.write_whole(str(tmp_path / "a" / "b.json"), b"[]", within=str(tmp_path))
    assert os.listdir(tmp_path / "a") == ["b.json"]
    assert (tmp_path / "a" / "b.json").read_bytes() == b"[]"


def test_a_linked_checkpoints_folder_is_refused_before_orbax_writes_through_it(tmp_path):
    run, elsewhere = _run_with_linked(tmp_path, "checkpoints")
    with pytest.raises(safe_files.LinkRefusedError) as refused:
        run_folder.checkpoint_dir(str(run), made=True)
    assert str(refused.value) == refusal(run / "checkpoints", elsewhere)
    assert run_folder.checkpoint_dir(str(tmp_path / "fresh"), made=True) == str(
        tmp_path / "fresh" / "checkpoints")
    assert (tmp_path / "fresh" / "checkpoints").is_dir()
