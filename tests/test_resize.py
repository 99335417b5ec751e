"""``min_processes`` on this machine: a run that goes on with fewer processes and grows back.

A 3-process local cluster without warm spares. Process 2 is SIGKILLed during a run, and the
first engine the restart starts is SIGKILLed too (a lost slot: the process cannot be
restarted): the run goes on at 2 of 3, the checkpoint resharded, the data re-split; then
``scale(3)`` grows it back at its next checkpoint. Every row of the epoch is read once, the
losses and final weights are those of plain SGD on the same global batches. A mesh whose
model-parallel axis 2 devices do not divide is refused in one line, and the run restarts all
3 processes as without ``min_processes``.
"""

from __future__ import annotations

import glob
import os
import signal

import numpy as np
import pytest
from support.clusters import engine_pids, lose_a_slot, on_flag

pytestmark = pytest.mark.engines

ROWS, GLOBAL_BATCH, LR = 216, 12, 0.05  # 72 rows a process on 3: 18 steps an epoch
DATA = """
import numpy as np
_rng = np.random.default_rng(0)
elastic_x = _rng.standard_normal((216, 4)).astype(np.float32)
elastic_data = {"x": elastic_x, "y": elastic_x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32),
                "id": np.arange(216)}
"""
LOOP = """
def elastic(config):
    import os
    import time
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxnb

    ctx = jaxnb.get_context()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))  # built from the devices there are
    w = jax.device_put(jnp.zeros(4, jnp.float32), NamedSharding(mesh, P()))
    start, mine = 0, np.array([ctx.get_world_rank()])
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        state = checkpoint.restore({"w": w, "step": 0, "mine": mine})
        w, start, mine = state["w"], state["step"], state["mine"]

    @jax.jit
    def step(w, x, y):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - config["lr"] * grad, loss

    data = jaxnb.get_dataset_shard("train")
    batches = iter(data.iter_jax_batches(config["global_batch"], sharding=NamedSharding(mesh, P("data"))))
    for i in range(start, config["steps"]):
        batch = next(batches)
        w, loss = step(w, batch["x"], batch["y"])
        ids = np.asarray(multihost_utils.process_allgather(batch["id"], tiled=True)).tolist()
        saved = {"w": w, "step": i + 1, "mine": mine} if (i + 1) % 2 == 0 else None
        jaxnb.report({"step": i + 1, "loss": float(loss), "world": ctx.get_world_size(),
                      "ids": ids, "w": np.asarray(w).tolist()}, checkpoint=saved)
        if ctx.get_world_rank() == 0:
            open(f"{config['flags']}/step{i + 1}.on{ctx.get_world_size()}", "a").close()
        time.sleep(config["pause"])
        while ctx.get_world_size() == 2 and os.path.exists(config.get("hold", "")):
            time.sleep(0.1)  # the test holds the run on 2 (after one step there) until the grow was asked
"""
MESH = 'import jax\nmesh2d = jax.make_mesh((jax.device_count() // 3, 3), ("data", "model"))'


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """3 local processes, no warm spares (a restart starts every engine anew)."""
    made = make_cluster(3, init_timeout=30)
    made.run(DATA)
    made.run(LOOP)
    return made


def _config(tmp_path, steps: int = 18) -> dict:
    flags = tmp_path / "flags"
    flags.mkdir(exist_ok=True)
    return {"steps": steps, "global_batch": GLOBAL_BATCH, "lr": LR, "pause": 0.2, "flags": str(flags)}


def _kill_with_a_lost_slot(cluster, flag):
    """At ``flag``: SIGKILL process 2; the restart's first new engine dies too (a lost slot)."""
    victim, known = cluster.processes[2].pid, engine_pids(os.getpid())

    def kill() -> None:
        lose_a_slot(os.getpid(), known)
        os.kill(victim, signal.SIGKILL)

    return on_flag(flag, kill)


def plain_sgd(history):
    """Losses and weights of SGD in float64 on each step's global batch (its rows, any order)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 4)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    w, losses = np.zeros(4), []
    for h in history:
        rows = np.array(h["ids"])
        xb, yb = x[rows].astype(np.float64), y[rows].astype(np.float64)
        error = xb @ w - yb
        losses.append(float(np.mean(error ** 2)))
        w = w - LR * 2 * xb.T @ error / len(rows)
    return losses, w


@pytest.mark.timeout(600)
def test_a_lost_slot_goes_on_at_2_of_3_and_scale_grows_it_back(cluster, tmp_path, capsys):
    config = _config(tmp_path)
    killer = _kill_with_a_lost_slot(cluster, tmp_path / "flags" / "step5.on3")
    scaler = on_flag(tmp_path / "flags" / "step9.on2", lambda: cluster.scale(3), seconds=300)
    result = cluster.train("elastic", config, name="slot", storage=tmp_path, steps=18,
                           datasets={"train": "elastic_data"}, max_failures=2, min_processes=2)
    killer.join(1)
    scaler.join(1)
    said = capsys.readouterr().err
    assert result.error is None, result.error
    shrink, grow = result.failures
    assert (shrink.processes, shrink.old_size, shrink.new_size) == ((2,), 3, 2), shrink
    assert shrink.cause.startswith("[p2] (pid "), shrink  # killed by SIGKILL (or "exited" when
    # ipyparallel reaped it before jaxnb read its status: the recovery tests check the wording)
    assert (grow.processes, grow.old_size, grow.new_size, grow.cause) == (
        (), 2, 3, "`scale(3)` was asked"), grow
    assert grow.step == grow.resumed_from and grow.step % 2 == 0 and grow.step > shrink.resumed_from

    history = result.history
    assert [h["step"] for h in history] == list(range(1, 19))  # each step once: rewound, redone
    worlds = [h["world"] for h in history]
    assert worlds == [3] * shrink.resumed_from + [2] * (grow.step - shrink.resumed_from) \
        + [3] * (18 - grow.step)
    rows = [r for h in history for r in h["ids"]]
    assert sorted(rows) == list(range(ROWS))  # the epoch: every row once, across both changes
    assert all(len(h["ids"]) == GLOBAL_BATCH for h in history)  # the global batch stays
    losses, w = plain_sgd(history)
    np.testing.assert_allclose([h["loss"] for h in history], losses, rtol=1e-4)
    np.testing.assert_allclose(history[-1]["w"], w, rtol=1e-4, atol=1e-6)

    assert "jaxnb: run 'slot' goes on with 2 of 3 processes (an engine (pid " in said, said
    assert (f"jaxnb: checkpoint step {shrink.resumed_from} was saved by 3 processes and restored "
            "on 2: each process keeps its own per-process leaves (['mine']); process 2's are left "
            "out") in said
    assert (f"jaxnb: checkpoint step {grow.step} was saved by 2 processes and restored on 3: "
            "process 2 had no per-process leaves of its own (['mine']) and got those of process "
            "i mod 2") in said
    assert f"jaxnb: run 'slot' goes on with 3 processes from step {grow.step} (`scale(3)` was asked)" \
        in said
    assert cluster.num_processes == 3 and cluster.lost == [] and cluster.busy_with is None
    assert cluster.group.resize is None


@pytest.mark.timeout(300)
def test_scale_with_the_engines_idle_restarts_at_that_size_and_replays_the_setup(cluster, ip):
    from IPython.utils.capture import capture_output

    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(cluster, ip)
    try:
        with capture_output() as shown:
            ip.run_line_magic("jax_cluster", "scale 2")
        assert cluster.num_processes == 2 and cluster.lost == []
        assert "jaxnb: 2 processes; replayed 2 cells and 0 pushes" in shown.stdout, shown.stdout
        assert "2 processes" in shown.outputs[0].data["text/html"]  # the devices table
        cluster.run("import jax\nrows = len(elastic_data['id']) + jax.process_count()")  # replayed
        assert cluster.pull("rows") == ROWS + 2
        ip.run_line_magic("jax_cluster", "scale 3")
        assert cluster.num_processes == 3 and cluster.group.full_options is None
    finally:
        use_cluster(previous, ip)


@pytest.mark.timeout(600)
def test_a_mesh_the_fewer_devices_do_not_divide_is_refused_and_every_process_restarts(
        cluster, tmp_path, capsys):
    assert cluster.num_processes == 3
    cluster.run(MESH)  # part of the setup: replayed on the new processes
    killer = _kill_with_a_lost_slot(cluster, tmp_path / "flags" / "step5.on3")
    result = cluster.train("elastic", _config(tmp_path, 10), name="mesh", storage=tmp_path,
                           datasets={"train": "elastic_data"}, max_failures=2, min_processes=2)
    killer.join(1)
    said = [line for line in capsys.readouterr().err.splitlines() if "cannot go on" in line]
    assert result.error is None, result.error
    [failure] = result.failures
    assert failure.old_size is None and failure.new_size is None, failure
    assert said == ["jaxnb: run 'mesh' cannot go on with 2 processes: mesh `mesh2d` keeps its "
                    "model-parallel axis model=3, which 2 devices do not divide; restarting all 3, "
                    "as without min_processes="], said
    assert {h["world"] for h in result.history} == {3} and cluster.num_processes == 3
    assert glob.glob(str(tmp_path / "flags" / "*.on2")) == []


@pytest.mark.timeout(120)
def test_an_engine_killed_during_a_start_is_named_with_how_it_ended():
    """Without ``at_least`` a start still fails on it, naming it (it raised a NameError, or
    waited out --init-timeout when ipyparallel had already forgotten the engine)."""
    from jaxnb import JaxCluster, StartError

    lose_a_slot(os.getpid(), engine_pids(os.getpid()))
    with pytest.raises(StartError, match=r"^an engine \(pid \d+\) was killed by SIGKILL during "
                                         r"start-up; see its last lines below"):
        JaxCluster(n=2, spares=0, init_timeout=20).start()
