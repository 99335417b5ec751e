"""JAX's persistent compilation cache on real engines (on by default, ``--compile-cache``).

Every process writes and reads it: a second cluster's first step hits it on every process
(for a program over all processes and for each process's own), and so do the new engines
of a ``restart --replay``, of a recovery, and a search's trials. Each test has its own
folder, so what it counts is its own.
"""

from __future__ import annotations

import pytest

from jaxnb import JaxCluster, tune

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines

#: A step that takes well over the cache's 10 ms minimum to compile (unrolled), run once on
#: each process's own device and once over every process's devices (a collective).
SETUP = """\
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def heavy(x):
    for i in range(24):
        x = jnp.tanh(x @ x.T @ x) * (i + 1) + jnp.sin(x)
    return x

local = jax.jit(heavy)(jnp.ones((32, 32)))             # this process's device: its own entry
mesh = Mesh(np.array(jax.devices()), ("i",))
rows = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), np.ones((32, 32)))
spread = jax.jit(lambda x: heavy(x).sum())(rows)         # every process's devices: one entry
"""


def _caches(cluster: JaxCluster) -> list[dict]:
    return [p.compile_cache for p in cluster.status()]


@pytest.mark.timeout(300)
def test_a_second_clusters_first_step_hits_the_cache_on_every_process(tmp_path):
    folder = str(tmp_path / "xla")
    with JaxCluster(n=2, spares=0, compile_cache=folder) as cluster:
        cluster.run(SETUP)
        first = _caches(cluster)
    assert [c["folder"] for c in first] == [folder, folder]
    assert all(c["hits"] == 0 and c["writes"] >= 1 for c in first), first  # process 1 writes too
    assert first[0]["entries"] >= 3  # the program over both processes, and each one's own
    with JaxCluster(n=2, spares=0, compile_cache=folder) as cluster:
        cluster.run(SETUP)
        second = _caches(cluster)
    assert all(c["hits"] >= 2 for c in second), second
    # JAX's own estimate, from compile times it stores in whole seconds: a sub-second compile
    # saves "0 s minus the read", so its sign depends on the machine's speed (never asserted).
    assert all(isinstance(c["saved_seconds"], float) for c in second), second


@pytest.mark.timeout(300)
def test_off_turns_it_off(tmp_path):
    with JaxCluster(n=1, spares=0, compile_cache="off") as cluster:
        cluster.run(SETUP)
        (cache,) = _caches(cluster)
    assert cache["folder"] is None and cache["lookups"] == 0


def trains_and_dies_once(config):
    """A jitted step (made anew by each attempt), a checkpoint every 2 steps; process 1 SIGKILLs
    itself at step 3, once."""
    import os
    import signal

    import jax
    import jax.numpy as jnp

    import jaxnb

    checkpoint = jaxnb.get_checkpoint()
    start = 0 if checkpoint is None else int(checkpoint.restore()["step"])
    step_fn = jax.jit(lambda x: heavy(x) + 1.0)  # noqa: F821 (heavy: defined by SETUP)
    for step in range(start + 1, config.get("steps", 5) + 1):
        x = step_fn(jnp.ones((32, 32)) * config.get("x", 1.0))
        jaxnb.report({"step": step, "loss": float(x[0, 0])},
                     checkpoint={"step": step} if step % 2 == 0 else None)
        marker = config.get("marker")
        if marker and step == 3 and jaxnb.get_context().get_world_rank() == 1 \
                and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(600)
def test_replay_recovery_and_trials_use_it(tmp_path):
    folder = str(tmp_path / "xla")
    with JaxCluster(n=2, spares=0, compile_cache=folder) as cluster:
        cluster.run(SETUP)
        cluster.restart(replay=True)  # new processes, the setup replayed
        assert all(c["hits"] >= 2 for c in _caches(cluster)), _caches(cluster)

        result = cluster.train(trains_and_dies_once, {"marker": str(tmp_path / "killed")},
                               storage=str(tmp_path), max_failures=1)
        assert result.error is None and len(result.failures) == 1, result
        # The recovery's new processes: the replayed setup and the resumed step hit.
        assert all(c["hits"] >= 3 for c in _caches(cluster)), _caches(cluster)

        before = [c["hits"] for c in _caches(cluster)]
        search = cluster.tune(trains_and_dies_once, {"x": tune.choice([1.0, 2.0])}, trials=2,
                              metric="loss", config={"steps": 2}, storage=str(tmp_path), show=False)
        assert [t.state for t in search.trials] == ["COMPLETE", "COMPLETE"]
        after = [c["hits"] for c in _caches(cluster)]
        assert all(a >= b + 2 for a, b in zip(after, before, strict=True)), (before, after)


@pytest.mark.timeout(600)
def test_a_recovery_on_warm_spares_with_the_cache_ends_bit_identical(tmp_path):
    """The defaults a user gets (warm spares, the cache on): p1 killed at step 12, the run
    recovered on the spares, its step read from the cache; the final parameters are the
    uninterrupted run's, bit for bit."""
    import numpy as np
    from support.clusters import wait_until
    from test_recovery import checkpointed_loop

    config = {"steps": 20, "every": 5}
    with JaxCluster(n=2, compile_cache=str(tmp_path / "xla")) as cluster:
        clean = cluster.train(checkpointed_loop, {**config, "out": str(tmp_path / "clean.npy")},
                              name="clean", storage=tmp_path)
        wait_until(lambda: len(cluster.group.spare_pids) == 2, 120, "the spares starting")
        spares = set(cluster.group.spare_pids)
        wait_until(lambda: len(cluster.client.ids) >= 4, 120, "the spares registering")
        killed = cluster.train(
            checkpointed_loop, {**config, "out": str(tmp_path / "killed.npy"),
                                "kills": [(1, 12, str(tmp_path / "marker"))]},
            name="killed", storage=tmp_path, max_failures=1)
        assert killed.error is None and len(killed.failures) == 1, killed
        assert {p.pid for p in cluster.processes} == spares  # recovered on the warm spares
        assert all(c["hits"] >= 1 for c in _caches(cluster))  # the step came from the cache
    assert [h["loss"] for h in killed.history] == [h["loss"] for h in clean.history]
    assert np.load(tmp_path / "killed.npy").tobytes() == np.load(tmp_path / "clean.npy").tobytes()
