"""A process killed (SIGKILL) at each point of a checkpoint's save: every committed step resumes
to exactly the batches of an uninterrupted run (issue 30, "Nothing lost, even in a crash").

The engine kills itself where ``JAXNB_CRASH_AT`` says (``_engine/checkpoint/crash_points``):
before anything of the step is written, after every process wrote its part but before the
commit, after the commit, after the report. The killed process's positions log is removed
before the resume, as a crashed host may lose what it had not synced: a committed step must
carry its positions itself.
"""

from __future__ import annotations

import os

import pytest

from jaxnb import JaxnbError
from jaxnb._core.run_folder import saved_steps

DATA = """
import numpy as np
crash_rows = {"id": np.arange(80), "x": np.arange(80.0)}
"""
DATASETS = {"train": "crash_rows"}


def counted_batches(config):
    """12 steps over a shuffled dataset (10 batches an epoch); a checkpoint every 3 steps."""
    import os

    import numpy as np
    from jax.experimental import multihost_utils

    import jaxnb

    os.environ.pop("JAXNB_CRASH_AT", None)
    if config.get("crash"):
        os.environ["JAXNB_CRASH_AT"] = config["crash"]
    shard = jaxnb.get_dataset_shard("train")

    def epoch():
        return iter(shard.iter_batches(batch_size=4, local_shuffle_buffer_size=8,
                                       local_shuffle_seed=5))

    batches = epoch()
    checkpoint = jaxnb.get_checkpoint()
    for i in range(checkpoint.step if checkpoint else 0, config["steps"]):
        try:
            batch = next(batches)
        except StopIteration:
            batches = epoch()
            batch = next(batches)
        ids = np.asarray(multihost_utils.process_allgather(batch["id"])).tolist()
        saved = {"step": i + 1} if (i + 1) % 3 == 0 else None
        jaxnb.report({"step": i + 1, "ids": ids}, checkpoint=saved)


@pytest.fixture(scope="module")
def crashing(make_cluster):
    cluster = make_cluster(2, spares=1)
    cluster.run(DATA)
    return cluster


@pytest.fixture(scope="module")
def whole(crashing, tmp_path_factory):
    run = crashing.train(counted_batches, {"steps": 12}, name="whole",
                         storage=tmp_path_factory.mktemp("whole"), datasets=DATASETS)
    assert [h["step"] for h in run.history] == list(range(1, 13))
    return run.history


@pytest.mark.parametrize(("point", "process", "committed"), [
    ("saving", 1, 3), ("writing", 0, 3), ("committed", 1, 6), ("committed", 0, 6),
    ("reported", 0, 6),
])
def test_a_crash_at_each_point_of_a_save_resumes_to_the_batches_of_an_uninterrupted_run(
        crashing, whole, tmp_path, point, process, committed):
    with pytest.raises(JaxnbError) as crashed:
        crashing.train(counted_batches, {"steps": 12, "crash": f"{point}:6:{process}"},
                       name="crashed", storage=tmp_path, datasets=DATASETS)
    assert f"[p{process}]" in str(crashed.value) and "SIGKILL" in str(crashed.value), crashed.value
    run_dir = tmp_path / "crashed"
    assert saved_steps(str(run_dir))[-1] == committed
    os.unlink(run_dir / "datasets" / f"process_{process}.jsonl")  # lost with its host
    crashing.restart(replay=True)
    rest = crashing.train(counted_batches, {"steps": 12}, name="crashed", storage=tmp_path,
                          datasets=DATASETS, resume=True)
    assert rest.error is None
    assert [h["step"] for h in rest.history] == list(range(committed + 1, 13))
    assert rest.history == whole[committed:]  # the same batches on every process


def test_every_process_killed_after_a_commit_leaves_that_steps_report_in_the_history(
        crashing, whole, tmp_path):
    """Every process dies between the commit of step 6 and its report (none reached the notebook):
    the recovery resumes from step 6 and books the report the checkpoint keeps."""
    run = crashing.train(counted_batches, {"steps": 12, "crash": "committed:6:*"}, name="all",
                         storage=tmp_path, datasets=DATASETS, max_failures=1)
    assert run.error is None, run.error
    assert [f.resumed_from for f in run.failures] == [6], run.failures
    assert run.steps == list(range(1, 13)), run.steps
    assert run.history == whole  # step 6's metrics are process 0's, as an uninterrupted run's
