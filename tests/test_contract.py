"""The notebook/engine contract and the pure parts of start-up and pulling (milliseconds)."""

from __future__ import annotations

import os
import pickle

import pytest

from jaxnb._cells.pull import choose
from jaxnb._core.contract import ELSEWHERE, MISSING, EngineCall, JoinParams, stack_file
from jaxnb._core.join_plan import join_params, placements
from jaxnb._core.options import ClusterOptions
from jaxnb._core.run_folder import (
    Checkpoint,
    check_fresh_run,
    hold,
    make,
    release,
    remember_user_checkpoint,
    remove_if_empty,
)


def test_placements_rank_processes_within_their_host():
    assert placements(["a", "a", "b", "a"]) == [(0, 3, 0), (1, 3, 0), (0, 1, 1), (2, 3, 0)]


def test_join_params_for_a_local_cpu_cluster():
    params = join_params(ClusterOptions(n=2), "127.0.0.1:1234", ["h", "h"])
    assert [p.process_id for p in params] == [0, 1]
    assert all(p.num_processes == 2 and p.coordinator == "127.0.0.1:1234" for p in params)
    assert all(p.bind_address == "127.0.0.1:1234" for p in params)  # loopback only
    assert all(p.local_device_ids is None and p.init for p in params)
    assert params[1].placement == (1, 2, 0)


def test_join_params_pick_each_gpu_by_local_rank_and_keep_no_init():
    options = ClusterOptions(platform="gpu", hosts=("a", "b"), init=False)
    params = join_params(options, "10.0.0.1:99", ["a", "a", "b"])
    assert [p.local_device_ids for p in params] == [(0,), (1,), (0,)]
    assert all(p.bind_address == "10.0.0.1:99" and not p.init for p in params)  # process 0 only


def test_join_params_travel_by_pickle():
    params = join_params(ClusterOptions(n=2), "127.0.0.1:1", ["h", "h"])[0]
    assert pickle.loads(pickle.dumps(params)) == params
    assert isinstance(params, JoinParams)


def test_an_engine_call_imports_its_function_where_it_runs():
    call = EngineCall("os.path:join")
    assert pickle.loads(pickle.dumps(call))("a", "b") == os.path.join("a", "b")
    assert "os.path:join" in repr(call)


def test_stack_file_is_named_by_pid():
    assert stack_file("/tmp/x", 12) == "/tmp/x/jaxnb-stacks-12.txt"


def test_pull_takes_process_0s_value_or_says_where_the_name_is_missing():
    assert choose("x", [41, ELSEWHERE]) == 41
    with pytest.raises(NameError, match="not defined on any process"):
        choose("x", [MISSING, MISSING])
    with pytest.raises(NameError, match=r"not defined on process 0 \(only on processes \[1\]\)"):
        choose("x", [MISSING, ELSEWHERE])


def test_a_run_folder_remembers_the_users_own_checkpoint(tmp_path):
    run = str(tmp_path / "run")
    assert check_fresh_run(run, resume=True) is None
    remember_user_checkpoint(run, 7, "/data/ckpt-7")
    assert check_fresh_run(run, resume=True) == Checkpoint(7, "/data/ckpt-7", user_managed=True)
    with pytest.raises(FileExistsError, match="already has checkpoints \\(steps 7\\); pass resume=True"):
        check_fresh_run(run, resume=False)
    with Checkpoint(7, "/data/ckpt-7").as_directory() as path:
        assert path == "/data/ckpt-7"


def test_a_run_folder_left_empty_goes_with_the_folders_made_for_it(tmp_path):
    (tmp_path / "kept").mkdir()
    made = make(str(tmp_path / "runs" / "fit"))
    assert made == [str(tmp_path / "runs" / "fit"), str(tmp_path / "runs")]
    remove_if_empty(made)
    assert sorted(os.listdir(tmp_path)) == ["kept"]
    made = make(str(tmp_path / "kept" / "fit"))
    (tmp_path / "kept" / "fit" / "checkpoints").mkdir()
    remove_if_empty(made)  # the run saved something: all stays
    assert os.listdir(tmp_path / "kept" / "fit") == ["checkpoints"]
    assert make(str(tmp_path / "kept")) == []  # there before: never removed


def test_a_run_folder_holding_only_its_lock_goes_when_the_run_ends(tmp_path):
    run_dir = str(tmp_path / "runs" / "fit")
    made = make(run_dir)
    release(hold(run_dir), made)  # a run that saved nothing: its lock file is not kept either
    assert os.listdir(tmp_path) == []
    made = make(run_dir)
    lock = hold(run_dir)
    (tmp_path / "runs" / "fit" / "metrics.json").write_text("{}")
    release(lock, made)
    assert sorted(os.listdir(run_dir)) == ["metrics.json", "run.lock"]
    assert not lock.held


def test_a_run_that_left_only_its_reports_goes_too_but_its_reports_stay_beside_a_checkpoint(tmp_path):
    run_dir = str(tmp_path / "runs" / "fit")
    made = make(run_dir)
    lock = hold(run_dir)
    (tmp_path / "runs" / "fit" / "reports.jsonl").write_text("{}\n")
    release(lock, made)  # the kernel that releases it followed it to its end
    assert os.listdir(tmp_path) == []
    made = make(run_dir)
    lock = hold(run_dir)
    (tmp_path / "runs" / "fit" / "reports.jsonl").write_text("{}\n")
    (tmp_path / "runs" / "fit" / "checkpoints").mkdir()
    release(lock, made)
    assert sorted(os.listdir(run_dir)) == ["checkpoints", "reports.jsonl", "run.lock"]
