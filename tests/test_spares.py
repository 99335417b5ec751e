"""Warm spares: a restart joins engines that were started, with JAX imported, beforehand;
they are refilled after each swap, so that a second death in a run swaps too."""

from __future__ import annotations

import time

import psutil
import pytest
from support.clusters import exited, wait_until

from jaxnb import JaxCluster
from jaxnb._lifecycle import refill, spares

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines


def _spares_registered(cluster: JaxCluster, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    want = cluster.num_processes + len(cluster.group.spare_pids)
    while len(cluster.client.ids) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(cluster.client.ids) >= want, "the spares never registered"


def _total(cluster: JaxCluster) -> float:
    cluster.run("import numpy as np\nfrom jax.experimental import multihost_utils\n"
                "total = float(multihost_utils.process_allgather(np.ones(1)).sum())")
    return cluster.pull("total")


def killed_twice(config):
    """A collective and a report per step, a checkpoint every 2; process 1 SIGKILLs itself
    at step 3, then at step 7 once every process saw ``config["go"]`` (the test makes it when
    the spares taken by the first recovery were replaced)."""
    import os
    import signal
    import time

    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    checkpoint = jaxnb.get_checkpoint()
    start = int(checkpoint.restore()["step"]) if checkpoint is not None else 0
    for step in range(start + 1, 9):
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step}, checkpoint={"step": step} if step % 2 == 0 else None)
        mark = os.path.join(config["marks"], f"killed-{step}")
        if step in (3, 7) and not os.path.exists(mark):
            while step == 7 and not os.path.exists(config["go"]):
                time.sleep(0.05)
            if rank == 1:
                open(mark, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)


def _back_to_back(cluster: JaxCluster, tmp_path) -> None:
    """Two deaths in one run: each recovery swaps to spares (the second to the ones started
    after the first), and neither says that no spare was ready."""
    go = tmp_path / "go"
    run = cluster.train(killed_twice, {"go": str(go), "marks": str(tmp_path)}, name="twice",
                        storage=tmp_path, max_failures=2, background=True)
    # A failure is booked when it is seen, before its recovery swapped the spares in: wait
    # for the resume, so that the spares counted below are the ones started after the swap.
    wait_until(lambda: (len(run.failures) == 1 and run.failures[0].resumed_from is not None)
               or not run.running, 120, "the first recovery")
    first_group = {p.pid for p in cluster.processes}
    wait_until(lambda: len(spares.ready(cluster.group)) == 2 or not run.running, 120,
               "the spares refilled after the first recovery")
    refilled = set(cluster.group.spare_pids)
    go.touch()
    run.wait(120)
    assert run.error is None, run.error
    assert [f.resumed_from for f in run.failures] == [2, 6] and len(refilled) == 2
    for failure in run.failures:
        assert not [k for k in failure.phases if k.startswith(refill.NO_SPARE)], failure.phases
    assert {p.pid for p in cluster.processes} == refilled and not refilled & first_group


@pytest.mark.timeout(360)
def test_a_restart_joins_the_warm_spares_then_starts_new_ones(tmp_path):
    others = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. the shared cluster
    with JaxCluster(n=2) as cluster:
        deadline = time.monotonic() + 60  # spares start a few seconds after the cluster
        while len(cluster.group.spare_pids) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        spares = set(cluster.group.spare_pids)
        assert len(spares) == 2 and not spares & {p.pid for p in cluster.processes}
        old = [p.pid for p in cluster.processes]
        cluster.run("x = 1")
        _spares_registered(cluster)
        cluster.restart()
        assert {p.pid for p in cluster.processes} == spares  # the spares became the group
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                       for pid in old)
        deadline = time.monotonic() + 60  # new spares start a little later
        while len(cluster.group.spare_pids) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        _spares_registered(cluster)
        assert len(cluster.group.spare_pids) == 2 and not cluster.group.spare_pids & spares
        assert _total(cluster) == 2.0
        with pytest.raises(Exception, match="name 'x' is not defined"):
            cluster.run("x")  # new processes: an empty namespace, as after any restart
        _back_to_back(cluster, tmp_path)  # then a run that loses a process twice
        family = [p for p in psutil.Process().children(recursive=True) if p.pid not in others]
    wait_until(lambda: not [p for p in family if p.is_running() and not exited(p.pid)], 10,
               "every process of the stopped cluster ending")


def _spare_ids(cluster: JaxCluster) -> list[int]:
    members = {p.engine_id for p in cluster.processes}
    return [eid for eid in cluster.client.ids if eid not in members]


#: Evaluated on a spare: what it imported, whether JAX's backends exist, whether it is in a
#: ``jax.distributed`` group, whether its namespace holds the setup's variable.
SPARE_STATE = (
    "(lambda sys, jax_internals, values: {"
    "'optax': 'optax' in sys.modules, 'orbax': 'orbax.checkpoint' in sys.modules,"
    "'backends': jax_internals.backends_created(),"
    "'in group': jax_internals.distributed_client() is not None,"
    "'marker': 'marker' in values.user_namespace()})(__import__('sys'),"
    "__import__('jaxnb._engine.jax_internals', fromlist=['_']),"
    "__import__('jaxnb._engine.run.values', fromlist=['_']))"
)


@pytest.mark.timeout(300)
def test_spares_import_what_the_setup_imported_and_run_none_of_it(tmp_path):
    ran = tmp_path / "ran"
    with JaxCluster(n=2) as cluster:
        wait_until(lambda: len(cluster.group.spare_pids) == 2, 60, "the spares starting")
        _spares_registered(cluster)
        # A cell without a last expression runs silent (IPython skips post_run_cell then).
        cluster.run(f"import optax\nmarker = 1\nwith open({str(ran)!r}, 'a') as f:\n    f.write('x')")
        assert "optax" in cluster.group.warm_modules

        def warmed(ids: list[int]) -> list[dict]:
            return cluster.client[ids].apply_async(eval, SPARE_STATE).get(timeout=60)

        spares = warmed(_spare_ids(cluster))  # they imported it (their queue: import, then this)
        assert spares == [{"optax": True, "orbax": True, "backends": False, "in group": False,
                           "marker": False}] * 2, spares  # never the user's code, no JAX backend
        assert ran.read_text() == "xx"  # the cell ran on the 2 processes only
        cluster.restart()  # a swap: the spares are the group now, optax already imported
        group = cluster.view.apply_async(eval, SPARE_STATE).get(timeout=60)
        assert [s["optax"] and s["in group"] and not s["marker"] for s in group] == [True, True]
        wait_until(lambda: len(cluster.group.spare_pids) == 2, 60, "the new spares starting")
        _spares_registered(cluster)  # started later: they import it before they register
        assert [s["optax"] for s in warmed(_spare_ids(cluster))] == [True, True]


@pytest.mark.timeout(120)
def test_spares_0_keeps_none_and_restarts_the_slow_way():
    with JaxCluster(n=2, spares=0) as cluster:
        assert cluster.group.spare_pids == set()
        old = {p.pid for p in cluster.processes}
        cluster.restart()
        assert not old & {p.pid for p in cluster.processes}
        assert _total(cluster) == 2.0


def test_spares_must_be_a_whole_number():
    from jaxnb._core.options import OptionError

    for bad in (-1, 1.5, True):
        with pytest.raises(OptionError, match="spares= must be a whole number >= 0"):
            JaxCluster(n=2, spares=bad)


def test_one_spare_per_process_here_and_on_ssh_hosts_none_for_batch_launchers():
    from jaxnb._lifecycle import spares

    assert spares.wanted(JaxCluster(n=2).group) == 2
    assert spares.wanted(JaxCluster(hosts=["10.0.0.1", "10.0.0.2:2"]).group) == 3  # as many per host
    assert spares.wanted(JaxCluster(hosts=["10.0.0.1", "10.0.0.2"], spares=0).group) == 0
    assert spares.wanted(JaxCluster(hosts=["10.0.0.1"], spares=1).group) == 1
    assert spares.wanted(JaxCluster(engines="mpi", hosts=["10.0.0.1", "10.0.0.2"]).group) == 0
