"""``JaxCluster.train`` when a process dies or is left waiting in a collective mid-run.

These tests break their cluster's group on purpose, so they have a cluster of their own.
"""

from __future__ import annotations

import pytest

from jaxnb import JaxCluster, ProcessFailure

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """This module's own cluster: its tests interrupt, fail and restart it."""
    return make_cluster()


def collective_total(cluster: JaxCluster) -> float:
    """Run one all-gather on every process; its sum, pulled from the engines."""
    cluster.run("import numpy as np\nfrom jax.experimental import multihost_utils\n"
                "total = float(multihost_utils.process_allgather(np.ones(1)).sum())")
    return cluster.pull("total")


def dies_mid_run(config):
    """Every step all-gathers across the processes; process 1 is killed at step 20."""
    import os
    import signal

    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    for step in range(1, 100_000):
        total = multihost_utils.process_allgather(jnp.ones(1)).sum()
        jaxnb.report({"step": step, "total": total})
        if rank == config["victim"] and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)


def fails_while_the_other_waits(config):
    """Process 1 raises; process 0 goes on into an all-gather that can never complete."""
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    for step in range(1, 100_000):
        if rank == 1 and step == 10:
            raise RuntimeError("lost the data loader")
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", [1, 0])
def test_process_killed_mid_run_names_it_and_keeps_history(cluster, tmp_path, victim):
    with pytest.raises(ProcessFailure) as info:
        cluster.train(dies_mid_run, {"victim": victim}, storage=tmp_path)
    message = str(info.value)
    assert f"[p{victim}]" in message and "SIGKILL" in message
    result = info.value.result
    assert result.error is info.value
    steps = [h["step"] for h in result.history]
    assert steps == list(range(1, len(steps) + 1)) and steps
    if victim == 1:  # process 0 (the history's source) got to step 20 before its peer died
        assert len(steps) >= 19
    assert cluster.busy_with is None
    cluster.restart()  # what the message tells the user to do
    assert collective_total(cluster) == 2.0


@pytest.mark.timeout(120)
def test_failure_while_another_process_waits_in_a_collective(cluster, tmp_path):
    with pytest.raises(ProcessFailure) as info:  # reported as in a cell: divergence, with stacks
        cluster.train(fails_while_the_other_waits, storage=tmp_path)
    message = str(info.value)
    assert info.value.processes == [0]  # the one left waiting, stopped by jaxnb
    assert "processes diverged: [p1] raised RuntimeError: lost the data loader" in message
    assert "still running: [p0] at " in message and "in fails_while_the_other_waits" in message
    result = info.value.result
    assert [h["step"] for h in result.history] == list(range(1, len(result.history) + 1))
    assert cluster.busy_with is None
    # The next cell repairs the group instead of pairing with the stale collective.
    assert collective_total(cluster) == 2.0
