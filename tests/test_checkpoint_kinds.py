"""Checkpoints of every kind of leaf a training loop holds, on a real 2-process cluster."""


import os

import pytest

from jaxnb import RemoteError

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """This module's own cluster: 2 processes x 2 CPU devices, so that ``pmap`` outputs and
    host-local arrays span several local devices (``report`` keeps one step in flight there,
    README "CPU collectives"). One of its tests makes every process raise on purpose. The
    state's dataclass is defined on the engines, as a notebook's %%jax_cluster cell would: a
    checkpoint names its class, and ``restore()`` finds it there (never by unpickling)."""
    made = make_cluster(2, devices_per_process=2)
    made.run(LOADER_CELL)
    return made


LOADER_CELL = """
import dataclasses

@dataclasses.dataclass
class Loader:
    position: int
    seed: object
"""


# ---- functions that run on the engines --------------------------------------------------


def every_kind_state(rank: int, step: int):
    """One leaf of each kind, its values fixed by (rank, step); some differ per process."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import __main__

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(2, 3, rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)

    mesh = jax.make_mesh((jax.device_count(),), ("x",), devices=jax.devices())
    n = 2 * jax.device_count()
    model = Model(nnx.Rngs(step, dropout=step + 1))
    model.dropout(jnp.ones(3))  # advance the dropout RNG count
    params = {"w": jnp.full((2, 2), float(step)), "b": jnp.arange(2.0)}
    optimizer = optax.adam(0.1)
    opt_state = optimizer.init(params)
    _, opt_state = optimizer.update(params, opt_state, params)
    return {
        "numpy": np.arange(4.0) * step,
        "numpy_scalar": np.int64(step),
        "numpy_strings": np.array(["a", f"step {step}"]),
        "py": {"lr": 0.5 * step, "epoch": step, "name": f"run{step}", "flag": step % 2 == 0},
        "global_sharded": jax.make_array_from_callback(
            (n,), NamedSharding(mesh, P("x")), lambda i: np.arange(n, dtype=np.float32)[i] * step),
        "global_replicated": jax.device_put(np.full(3, step, np.int32), NamedSharding(mesh, P())),
        "local": jnp.arange(3.0) * step,
        "local_bf16": jnp.ones(2, jnp.bfloat16) * step,
        "pmap": jax.pmap(lambda a: a * step)(jnp.ones((jax.local_device_count(), 2))),
        "nnx": nnx.state(model),
        "optax": opt_state,
        "loader": __main__.Loader(position=100 * rank + step, seed=jax.random.key(rank)),
        "per_process": jnp.full(2, rank + 10 * step, jnp.int32),
        "per_process_np": np.full(rank + 1, step, np.uint8),  # a shape per process too
        "nothing": None,
        "tuple": (1, [2.0, None]),
    }


def differences(got, want) -> list[str]:
    """Leaf by leaf: kind, dtype, devices/sharding and value (empty when all agree)."""
    import jax
    import numpy as np

    from jaxnb._engine.checkpoint.structure import flatten

    gp, gl, _ = flatten(got)
    wp, wl, _ = flatten(want)
    if gp != wp:
        return [f"paths {gp} != {wp}"]
    out = [] if type(got["loader"]).__name__ == "Loader" else [f"loader: {got['loader']!r}"]
    if type(got["nnx"]) is not type(want["nnx"]) or type(got["optax"][0]) is not type(
            want["optax"][0]):
        out.append(f"containers: {type(got['nnx'])}, {type(got['optax'][0])}")
    for path, a, b in zip(gp, gl, wl, strict=True):
        if type(a) is not type(b):
            out.append(f"{path}: {type(a).__name__} != {type(b).__name__}")
            continue
        if isinstance(b, jax.Array):
            if a.dtype != b.dtype or a.sharding != b.sharding:
                out.append(f"{path}: {a.dtype} {a.sharding} != {b.dtype} {b.sharding}")
            key = jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key)
            a, b = (jax.random.key_data(a), jax.random.key_data(b)) if key else (a, b)
            local = lambda x: [np.asarray(s.data) for s in x.addressable_shards]  # noqa: E731
            if any(not np.array_equal(x, y) for x, y in zip(local(a), local(b), strict=True)):
                out.append(f"{path}: values differ")
        elif isinstance(b, np.ndarray | np.generic):
            if a.dtype != b.dtype or not np.array_equal(a, b):
                out.append(f"{path}: {a!r} != {b!r}")
        elif a != b:
            out.append(f"{path}: {a!r} != {b!r}")
    return out


def every_kind(config):
    import jax

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    start, checked = 0, 0
    ck = jaxnb.get_checkpoint()
    if ck is not None:
        start = ck.step
        want = every_kind_state(rank, start)
        problems = differences(ck.restore(), want)
        as_target = every_kind_state(rank, 0)  # same layout, other values
        problems += ["target: " + p for p in differences(ck.restore(as_target), want)]
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if isinstance(x, jax.Array) else x, as_target)
        problems += ["abstract: " + p for p in differences(ck.restore(abstract), want)]
        assert not problems, f"process {rank}: {problems}"[:2000]
        checked = len(jax.tree.leaves(want))
    for step in range(start + 1, start + 1 + config["steps"]):
        state = every_kind_state(rank, step) if step % 2 == 0 else None
        jaxnb.report({"step": step, "start": start, "checked": checked}, checkpoint=state)


def sized(config):
    import jax.numpy as jnp
    import numpy as np

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    same = np.random.default_rng(0).standard_normal(config["floats"]).astype(np.float32)
    own = np.random.default_rng(rank + 1).standard_normal(config["floats"]).astype(np.float32)
    tree = {"same": jnp.asarray(same)} if config["same"] else {"own": jnp.asarray(own)}
    jaxnb.report({"step": 1}, checkpoint=tree)


def pmap_ddp(config):
    """Data-parallel training in the JAX multi-process guide's style: pmap + pmean, Adam."""
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    import jaxnb

    n_local = jax.local_device_count()
    first = jaxnb.get_context().get_world_rank() * n_local  # this process's first device index
    optimizer = optax.adam(0.3)
    true_w = np.array([[1.0], [-2.0], [0.5]], np.float32)

    def loss_fn(p, x, y):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    @functools.partial(jax.pmap, axis_name="devices")
    def train_step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        grads = jax.lax.pmean(grads, "devices")
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, jax.lax.pmean(loss, "devices")

    def batch(step):
        xs = [np.random.default_rng(1000 * step + first + d).standard_normal((16, 3), np.float32)
              for d in range(n_local)]
        x = np.stack(xs)
        return x, x @ true_w + 0.3

    ck = jaxnb.get_checkpoint()
    if ck is None:
        params0 = {"w": jnp.zeros((3, 1)), "b": jnp.zeros((1,))}
        params, opt_state = jax.pmap(lambda _: (params0, optimizer.init(params0)))(
            jnp.arange(n_local))
        start = 0
    else:
        state = ck.restore()
        params, opt_state, start = state["params"], state["opt"], state["step"]
        assert start == ck.step, (start, ck.step)
        leaves = jax.tree.leaves((params, opt_state))
        assert all(x.is_fully_addressable and x.shape[0] == n_local for x in leaves), leaves
        assert all(x.sharding.spec[0] == "devices" for x in leaves), leaves  # as pmap gave them
    for step in range(start + 1, start + 1 + config["steps"]):
        params, opt_state, loss = train_step(params, opt_state, *batch(step))
        saved = {"params": params, "opt": opt_state, "step": step} if step % 3 == 0 else None
        jaxnb.report({"step": step, "loss": loss[0], "local_devices": n_local}, checkpoint=saved)


def bad_leaf(config):
    import jax.numpy as jnp

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    if config["who"] == "all":
        extra = {"log": open(os.devnull)}  # noqa: SIM115 - the leaf is an open file
    else:
        extra = {"fn": (lambda: 1) if rank == config["who"] else 1}
    jaxnb.report({"step": 1}, checkpoint={"w": jnp.ones(2), "extra": extra})


# ---- tests ------------------------------------------------------------------------------


def test_every_kind_saves_and_resumes_on_every_process(cluster, tmp_path):
    first = cluster.train(every_kind, {"steps": 4}, name="kinds", storage=tmp_path)
    assert first.error is None and first.checkpoint.step == 4
    again = cluster.train(every_kind, {"steps": 2}, name="kinds", storage=tmp_path, resume=True)
    assert [(h["step"], h["start"]) for h in again.history] == [(5, 4), (6, 4)]
    assert again.history[0]["checked"] > 20  # every leaf compared, on each process (else it raised)
    third = cluster.train(every_kind, {"steps": 1}, name="kinds", storage=tmp_path, resume=True)
    assert third.history[0]["start"] == 6 and third.history[0]["checked"] > 20
    assert sorted(int(d) for d in os.listdir(tmp_path / "kinds" / "checkpoints") if d.isdigit()) \
        == [2, 4, 6]


def _bytes(folder) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_identical_host_local_leaves_are_written_once(cluster, tmp_path):
    floats = 1_000_000  # 4 MB of random float32 (Orbax's compression cannot shrink it)
    cluster.train(sized, {"floats": floats, "same": True}, name="same", storage=tmp_path)
    cluster.train(sized, {"floats": floats, "same": False}, name="own", storage=tmp_path)
    same = _bytes(tmp_path / "same" / "checkpoints" / "1")
    own = _bytes(tmp_path / "own" / "checkpoints" / "1")
    assert 3e6 < same < 1.05 * 4e6, same  # one copy (Orbax's zstd takes a little off)
    assert 1.9 < own / same < 2.1, (own, same)  # one copy per process


def test_pmap_ddp_loop_checkpoints_and_resumes_exactly(cluster, tmp_path):
    whole = cluster.train(pmap_ddp, {"steps": 9}, name="whole", storage=tmp_path)
    part = cluster.train(pmap_ddp, {"steps": 7}, name="ddp", storage=tmp_path)
    assert part.checkpoint.step == 6
    rest = cluster.train(pmap_ddp, {"steps": 3}, name="ddp", storage=tmp_path, resume=True)
    assert [h["step"] for h in rest.history] == [7, 8, 9]
    assert {h["local_devices"] for h in whole.history} == {2}  # pmap over 2 devices per process
    losses = [float(h["loss"]) for h in whole.history]
    assert losses[-1] < 0.5 * losses[0]
    assert [float(h["loss"]) for h in rest.history] == losses[6:]  # Adam state came back exactly


@pytest.mark.parametrize("who", [1, "all"])
def test_unsaveable_leaf_is_refused_at_report_naming_its_path(cluster, tmp_path, who):
    with pytest.raises(RemoteError) as info:
        cluster.train(bad_leaf, {"who": who}, storage=tmp_path)
    text = str(info.value)
    if who == "all":
        assert info.value.processes == [0, 1]
        assert "LeafError: checkpoint leaf ['extra']['log'] is an open file (TextIOWrapper); " in text
    else:
        assert info.value.processes == [0, 1]
        assert "LeafError: checkpoint leaf ['extra']['fn'] is a function (<lambda>); " in text
        assert "process 1 could not save its checkpoint: LeafError: checkpoint leaf" in text
    assert "leave it out of the pytree" in text and "orbax" not in text.lower()
    assert not (tmp_path / "bad_leaf" / "checkpoints").exists() or not any(
        d.isdigit() for d in os.listdir(tmp_path / "bad_leaf" / "checkpoints"))
    cluster.group.suspect = None
    assert cluster.train(sized, {"floats": 4, "same": True}, name="after", storage=tmp_path
                         ).error is None
