"""A search on a cluster that loses a process ends with the reason (its own cluster: it breaks it)."""

from __future__ import annotations

import os

import pytest

from jaxnb import tune


@pytest.fixture(scope="module")
def cluster(make_cluster):
    return make_cluster()


def dies_on_far_x(config):
    import os

    import jaxnb

    if config["x"] > 5 and jaxnb.get_context().get_world_rank() == 1:
        os._exit(3)
    jaxnb.report({"loss": config["x"], "step": 1})


def test_a_search_ends_with_the_reason_when_processes_die(cluster, tmp_path):
    space = lambda t: {"x": 1.0 if t.number == 0 else 9.0}  # noqa: E731
    result = cluster.tune(dies_on_far_x, space, trials=4, storage=str(tmp_path), show=False)
    assert [t.state for t in result.trials] == ["COMPLETE", "FAIL"]
    assert "cannot run more trials" in result.stopped_because
    assert "restart the cluster" in result.stopped_because
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in result.study.trials)


def killed_once_then_resumed(config):
    """Checkpoints every step; process 1 SIGKILLs itself at step 3 once (a marker file)."""
    import os
    import signal

    import jaxnb

    checkpoint = jaxnb.get_checkpoint()
    start = checkpoint.restore()["step"] if checkpoint is not None else 0
    batches = jaxnb.get_dataset_shard("rows").iter_batches(batch_size=1)
    for step in range(start + 1, 7):
        row = next(batches)
        jaxnb.report({"loss": config["x"] / step, "step": step, "row": int(row["id"][0])},
                     checkpoint={"step": step})
        if step == 3 and jaxnb.get_context().get_world_rank() == 1 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def test_a_trial_with_max_failures_recovers_and_optuna_gets_each_step_once(cluster, tmp_path):
    cluster.restart()  # the test above left it with dead processes
    cluster.run("import numpy as np; rows = {'id': np.arange(40)}")
    marker = str(tmp_path / "killed")
    result = cluster.tune(killed_once_then_resumed, {"x": tune.choice([1.0])}, trials=1,
                          config={"marker": marker}, storage=str(tmp_path), show=True,
                          max_failures=1, datasets={"rows": "rows"}, pruner="none")
    trial = result.trials[0]
    assert os.path.exists(marker)  # it was killed
    assert trial.state == "COMPLETE", trial.error
    assert len(trial.failures) == 1 and "SIGKILL" in str(trial.failures[0])
    assert [r["step"] for r in trial.history] == [1, 2, 3, 4, 5, 6]
    # the data went on from where the checkpoint left it: process 0's share, in order, no repeat
    assert [r["row"] for r in trial.history] == list(range(0, 12, 2))
    assert result.study.trials[0].intermediate_values == {s: 1.0 / s for s in range(1, 7)}
