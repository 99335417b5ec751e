"""Datasets across a change of the number of processes (``--min-processes``, a resume elsewhere):
every row of the epoch read exactly once, the same global batches (pure parts, no cluster:
each process's share made here as the engines make it, the positions files written as they are)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxnb._engine.datasets.data_run import logged_positions, positions_file
from jaxnb._engine.datasets.shard import DatasetShard
from jaxnb._engine.datasets.source import DatasetError, source_of


def _shards(rows: int, processes: int, run_dir=None, step=None):
    """Every process's share; resumed from the positions noted at ``step`` when given."""
    source = source_of("d", {"id": np.arange(rows)})
    return [DatasetShard(source, p, processes,
                         None if step is None else logged_positions(str(run_dir), p, processes, step)["d"])
            for p in range(processes)]


def _note(run_dir, iterators, step: int) -> None:
    """What each process appends to its positions file at a checkpoint report."""
    (run_dir / "datasets").mkdir(exist_ok=True)
    for p, it in enumerate(iterators):
        line = {"step": step, "checkpoint": True, "num_processes": len(iterators),
                "positions": {"d": it.position()}}
        with open(positions_file(str(run_dir), p), "a") as f:
            f.write(json.dumps(line) + "\n")


def _steps(iterators, count: int | None = None) -> list[list[int]]:
    """``count`` steps (all when None): each step's global batch, process 0's rows first."""
    out = []
    while count is None or len(out) < count:
        try:
            batches = [next(it)["id"].tolist() for it in iterators]
        except StopIteration:
            return out
        out.append([r for b in batches for r in b])
    return out


@pytest.mark.parametrize("shuffle", [None, 10])
@pytest.mark.parametrize("drop_last", [True, False])
def test_three_then_two_then_three_read_each_row_of_the_epoch_once_in_the_same_global_batches(
        tmp_path, shuffle, drop_last):
    rows, kw = 187, {"batch_size": 4, "drop_last": drop_last, "local_shuffle_buffer_size": shuffle}
    straight = _steps([s.iter_batches(**kw, local_shuffle_seed=p) for p, s in
                       enumerate(_shards(rows, 3))])
    first = [s.iter_batches(**kw, local_shuffle_seed=p) for p, s in enumerate(_shards(rows, 3))]
    before = _steps(first, 5)
    _note(tmp_path, first, 5)
    two = [s.iter_batches(**kw) for s in _shards(rows, 2, tmp_path, 5)]  # 3 -> 2
    middle = _steps(two, 4)
    _note(tmp_path, two, 9)
    three = [s.iter_batches(**kw) for s in _shards(rows, 3, tmp_path, 9)]  # 2 -> 3
    after = _steps(three)
    done = before + middle + after
    assert [sorted(b) for b in done] == [sorted(b) for b in straight]  # the same global batches
    seen = [r for b in done for r in b]
    assert len(seen) == len(set(seen)) == sum(len(b) for b in straight)
    assert all(len(b) == 12 for b in done[:-1])  # the global batch stays: 6 a process on 2



def test_the_epoch_after_a_change_is_laid_out_for_the_processes_left(tmp_path):
    rows, kw = 60, {"batch_size": 2}
    first = [s.iter_batches(**kw) for s in _shards(rows, 3)]
    _steps(first, 3)
    _note(tmp_path, first, 3)
    shards = _shards(rows, 2, tmp_path, 3)
    rest = _steps([s.iter_batches(**kw) for s in shards])
    assert len(rest) == 10 - 3 and all(len(b) == 6 for b in rest)
    following = [s.iter_batches(**kw) for s in shards]
    assert [it.epoch for it in following] == [1, 1]
    batches = _steps(following)
    assert [b[:3] for b in batches[:2]] == [[0, 2, 4], [6, 8, 10]]  # process 0: rows 0, 2, 4, ...
    assert sorted(r for b in batches for r in b) == list(range(60))


def test_a_global_batch_the_processes_do_not_divide_is_rounded_down_and_said(tmp_path, capsys):
    rows, kw = 93, {"batch_size": 3, "drop_last": False}
    first = [s.iter_batches(**kw) for s in _shards(rows, 3)]  # a global batch of 9
    before = _steps(first, 2)
    _note(tmp_path, first, 2)
    rest = _steps([s.iter_batches(**kw) for s in _shards(rows, 2, tmp_path, 2)])
    said = capsys.readouterr().err.splitlines()  # each simulated process says it (the notebook once)
    assert sorted(said) == ["jaxnb: dataset 'd': left out the last 1 row of epoch 0 (rows that do "
                            "not split over 2 processes)"] * 2 + [
        "jaxnb: dataset 'd': the global batch of 9 rows does not split over 2 processes: each "
        "takes 4 (a global batch of 8) while they are 2"] * 2
    assert [len(b) for b in rest] == [8] * 9 + [2]  # 75 left: 9 of 8, then 1 each
    seen = [r for b in before + rest for r in b]
    assert len(seen) == len(set(seen)) == 93 - 1


def test_a_shuffled_epoch_needs_the_seed_of_every_process_that_began_it(tmp_path):
    rows, kw = 60, {"batch_size": 2, "local_shuffle_buffer_size": 4}
    first = [s.iter_batches(**kw) for s in _shards(rows, 3)]
    _steps(first, 1)
    _note(tmp_path, first, 1)
    positions_file_1 = tmp_path / "datasets" / "process_1.jsonl"
    positions_file_1.unlink()
    with pytest.raises(DatasetError, match="the shuffle seeds of the processes that began this "
                                           "epoch were not saved with it; start a new run"):
        _shards(rows, 2, tmp_path, 1)[0].iter_batches(**kw)


def _ray_batches(shards, global_batch: int, **kw):
    """Ray's idiom: each process asks for ``global_batch // world_size`` rows."""
    return [s.iter_batches(batch_size=global_batch // len(shards), **kw) for s in shards]


@pytest.mark.parametrize("shuffle", [None, 10])
def test_a_per_process_batch_from_the_world_size_continues_the_global_batch_exactly(
        tmp_path, capsys, shuffle):
    """The issue's run: 3 hosts cut to 2, the global batch kept at 24 by the loop itself (8 a
    process, then 12): the same global batches as a run that was never cut, each row once."""
    rows, kw = 301, {"drop_last": True, "local_shuffle_buffer_size": shuffle}
    straight = _steps([s.iter_batches(batch_size=8, **kw, local_shuffle_seed=p)
                       for p, s in enumerate(_shards(rows, 3))])
    first = [s.iter_batches(batch_size=8, **kw, local_shuffle_seed=p) for p, s in enumerate(_shards(rows, 3))]
    before = _steps(first, 4)
    _note(tmp_path, first, 4)
    two = _ray_batches(_shards(rows, 2, tmp_path, 4), 24, **kw)
    middle = _steps(two, 3)
    _note(tmp_path, two, 7)
    after = _steps(_ray_batches(_shards(rows, 3, tmp_path, 7), 24, **kw))  # and back to 3: 8 each
    done = before + middle + after
    assert [sorted(b) for b in done] == [sorted(b) for b in straight] and len(done) == rows // 24
    assert all(len(b) == 24 for b in done)
    seen = [r for b in done for r in b]
    assert len(seen) == len(set(seen))
    said = set(capsys.readouterr().err.splitlines())
    assert said == {
        "jaxnb: dataset 'd': batch_size=12 on 2 processes continues the global batch of 24 rows "
        "exactly (saved as batch_size=8 on 3 processes)",
        "jaxnb: dataset 'd': batch_size=8 on 3 processes continues the global batch of 24 rows "
        "exactly (saved as batch_size=12 on 2 processes)"}


def test_a_loop_that_keeps_its_per_process_batch_is_told_it_gets_the_global_batch_share(
        tmp_path, capsys):
    """8 rows a process asked on 2 after 3 × 8: jaxnb keeps the global batch (12 each), in one line."""
    first = [s.iter_batches(batch_size=8) for s in _shards(120, 3)]
    _steps(first, 2)
    _note(tmp_path, first, 2)
    rest = _steps([s.iter_batches(batch_size=8) for s in _shards(120, 2, tmp_path, 2)])
    assert [len(b) for b in rest] == [24, 24, 24]
    assert set(capsys.readouterr().err.splitlines()) == {
        "jaxnb: dataset 'd': batch_size=8 asked on 2 processes; each takes 12 to keep the global "
        "batch of 24 rows (saved on 3 processes); pass batch_size=global_batch // world_size to "
        "choose the per-process batch yourself"}


@pytest.mark.parametrize(("rows_each", "says"), [
    (10, "pass batch_size=12 (24 // 2) to continue it exactly"),
])
def test_a_per_process_batch_that_cannot_continue_names_the_exact_one(tmp_path, rows_each, says):
    first = [s.iter_batches(batch_size=8) for s in _shards(120, 3)]
    _steps(first, 2)
    _note(tmp_path, first, 2)
    with pytest.raises(DatasetError) as caught:
        _shards(120, 2, tmp_path, 2)[0].iter_batches(batch_size=rows_each)
    assert str(caught.value) == (
        "dataset 'd' was saved in global batches of 24 rows (batch_size=8 on 3 processes); "
        f"batch_size={rows_each} on 2 processes reads {rows_each * 2}, which cannot continue it exactly; "
        f"{says}, or start a new run (name='new')")


def test_a_global_batch_that_does_not_split_names_the_saved_batch(tmp_path):
    first = [s.iter_batches(batch_size=3) for s in _shards(93, 3)]  # a global batch of 9
    _steps(first, 2)
    _note(tmp_path, first, 2)
    with pytest.raises(DatasetError, match=r"the global batch does not split over 2 processes: pass "
                                           r"batch_size=3 and each takes 4, or start a new run"):
        _shards(93, 2, tmp_path, 2)[0].iter_batches(batch_size=5)
