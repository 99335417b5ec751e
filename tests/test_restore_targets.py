"""``get_checkpoint().restore(target)`` into what a training loop holds, on real 2-process clusters.

A model built under ``jax.set_mesh`` (global arrays and PRNG keys that span the
processes), and host-local arrays that were never committed to a device (``jnp.ones``,
Optax's ``count`` after ``jax.jit(opt.init)``): each comes back as the target held it,
and the first jitted step after the restore runs as it did on the original state.
Run with 1 and with 2 CPU devices per process.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def two_by_two(make_cluster):
    return make_cluster(2, devices_per_process=2)


@pytest.fixture(params=["1_device", "2_devices"])
def any_cluster(request):
    """The shared 2-process cluster (1 device each), then one with 2 devices per process."""
    return request.getfixturevalue("cluster" if request.param == "1_device" else "two_by_two")


# ---- functions that run on the engines --------------------------------------------------


def gpt2_style_model(config):
    """A small NNX model built as the GPT-2 page builds it: under ``jax.set_mesh(mesh)``."""
    import jax

    try:
        _gpt2_style_model(config)
    finally:
        jax.set_mesh(None)  # the mesh is the engine thread's global state: leave none for others


def _gpt2_style_model(config):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.experimental import mesh_utils, multihost_utils
    from jax.sharding import Mesh

    import jaxnb

    devices = mesh_utils.create_device_mesh((jax.process_count(), jax.local_device_count()))
    mesh = Mesh(devices, axis_names=("data", "model"))
    jax.set_mesh(mesh)

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(
                4, 8, kernel_init=nnx.with_partitioning(nnx.initializers.xavier_uniform(),
                                                        (None, "model")),
                bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ("model",)),
                rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.dropout(self.linear(x), deterministic=False)

    model = Block(nnx.Rngs(params=config["seed"], dropout=config["seed"] + 1))
    x = jnp.ones((2 * jax.device_count(), 4))
    ck = jaxnb.get_checkpoint()
    if ck is not None:
        target = nnx.to_pure_dict(nnx.state(model))
        restored = ck.restore(target)
        problems = []
        for (path, got), want in zip(jax.tree_util.tree_flatten_with_path(restored)[0],
                                     jax.tree.leaves(target), strict=True):
            if not isinstance(got, jax.Array) or got.sharding != want.sharding \
                    or got.dtype != want.dtype or got.committed != want.committed:
                problems.append(f"{jax.tree_util.keystr(path)}: {got!r:.80} vs {want.sharding}")
        assert not problems, problems
        as_saved = jax.tree.leaves(ck.restore())  # no target: keys and arrays as they were saved
        assert [x.dtype for x in as_saved] == [x.dtype for x in jax.tree.leaves(target)]
        assert all(x.sharding.is_equivalent_to(y.sharding, x.ndim)
                   for x, y in zip(as_saved, jax.tree.leaves(target), strict=True))
        state = nnx.state(model)
        nnx.replace_by_pure_dict(state, restored)
        nnx.update(model, state)
    y = nnx.jit(lambda m, x: m(x))(model, x)  # the first step after the restore
    kernel = model.linear.kernel[...]
    first = np.asarray(multihost_utils.process_allgather(kernel, tiled=True))
    out = float(jnp.sum(y))
    saved = nnx.to_pure_dict(nnx.state(model)) if ck is None else None
    jaxnb.report({"step": 1 if ck is None else 2, "kernel_sum": float(first.sum()), "out": out},
                 checkpoint=saved)


def uncommitted_leaves(config):
    """Host-local arrays never committed to a device, beside a global array."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxnb

    mesh = jax.make_mesh((jax.device_count(),), ("x",), devices=jax.devices())
    glob = jax.make_array_from_callback((2 * jax.device_count(),), NamedSharding(mesh, P("x")),
                                        lambda i: np.arange(2.0 * jax.device_count())[i])
    params = {"w": jnp.ones((2, 2))}
    opt_state = jax.jit(optax.adam(0.1).init)(params)
    state = {"plain": jnp.ones(3), "glob": glob, "opt": opt_state}
    step = jax.jit(lambda a, b, c: a.sum() + b.sum() + c[0].count)
    ck = jaxnb.get_checkpoint()
    if ck is None:
        assert not state["plain"].committed and not opt_state[0].count.committed
        jaxnb.report({"step": 1, "total": float(step(state["plain"], glob, opt_state))},
                     checkpoint=state)
        return
    results = {}
    for how, restored in [("target", ck.restore(state)), ("as_saved", ck.restore())]:
        committed = {k: [x.committed for x in jax.tree.leaves(restored[k])] for k in restored}
        want = {k: [x.committed for x in jax.tree.leaves(state[k])] for k in state}
        assert committed == want, (how, committed, want)
        results[how] = float(step(restored["plain"], restored["glob"], restored["opt"]))
    jaxnb.report({"step": 2, **results})


# ---- tests ------------------------------------------------------------------------------


def test_model_built_under_set_mesh_restores_into_its_own_state(any_cluster, tmp_path):
    first = any_cluster.train(gpt2_style_model, {"seed": 0}, name="mesh", storage=tmp_path)
    assert first.error is None and first.checkpoint.step == 1
    again = any_cluster.train(gpt2_style_model, {"seed": 7}, name="mesh", storage=tmp_path,
                              resume=True)  # other initial values: the restore must replace them
    assert again.error is None
    assert again.history[0]["kernel_sum"] == first.history[0]["kernel_sum"]


def test_uncommitted_arrays_come_back_uncommitted(any_cluster, tmp_path):
    first = any_cluster.train(uncommitted_leaves, name="plain", storage=tmp_path)
    total = first.history[0]["total"]
    again = any_cluster.train(uncommitted_leaves, name="plain", storage=tmp_path, resume=True)
    assert again.error is None
    assert again.history[0]["target"] == again.history[0]["as_saved"] == total
