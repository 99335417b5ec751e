"""Exact resume of the data: a run of 60 steps and a run of 30 resumed to 60 see the same
batches and, with the optimizer state and RNG key checkpointed, the same losses (CPU)."""

from __future__ import annotations

import pytest
from IPython.utils.capture import capture_output

DATA_CELL = """
import numpy as np
rng = np.random.default_rng(0)
resume_x = rng.standard_normal((100, 3)).astype(np.float32)
resume_train = {"x": resume_x, "y": resume_x @ np.array([1.0, -2.0, 0.5], np.float32),
                "id": np.arange(100)}
resume_val = {"x": resume_x[:40], "id": np.arange(40)}
"""


@pytest.fixture(scope="module")
def engines(cluster):
    cluster.run(DATA_CELL)
    return cluster


def shuffled_regression(config):
    """Ray's loop shape: an iterator per epoch, a new one at StopIteration; Adam; a dropout key."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.experimental import multihost_utils

    import jaxnb

    train_it, val_it = jaxnb.get_dataset_shard("train"), jaxnb.get_dataset_shard("val")

    def batches(shard, **kw):
        return iter(shard.iter_batches(batch_size=4, drop_last=True, prefetch_batches=2, **kw))

    train_batches = batches(train_it, local_shuffle_buffer_size=64, local_shuffle_seed=3)
    val_batches = batches(val_it)
    optimizer = optax.adam(0.05)
    params = {"w": jnp.zeros(3)}
    opt_state, key, start = optimizer.init(params), jax.random.key(0), 0
    ck = jaxnb.get_checkpoint()
    if ck is not None:
        state = ck.restore({"params": params, "opt": opt_state, "key": key, "step": 0})
        params, opt_state, key, start = state["params"], state["opt"], state["key"], state["step"]

    @jax.jit
    def step(params, opt_state, key, x, y):
        key, drop = jax.random.split(key)
        mask = jax.random.bernoulli(drop, 0.9, x.shape)

        def loss_fn(p):
            return jnp.mean((jnp.where(mask, x, 0.0) @ p["w"] - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, key, loss

    for i in range(start, config["steps"]):
        try:
            batch = next(train_batches)
        except StopIteration:
            train_batches = batches(train_it, local_shuffle_buffer_size=64, local_shuffle_seed=3)
            batch = next(train_batches)
        ids = multihost_utils.process_allgather(batch["id"])  # both processes' rows
        x, y = (multihost_utils.process_allgather(batch[k], tiled=True) for k in ("x", "y"))
        params, opt_state, key, loss = step(params, opt_state, key, x, y)
        metrics = {"step": i + 1, "loss": float(loss), "ids": np.asarray(ids).tolist()}
        if (i + 1) % 7 == 0:
            try:
                val = next(val_batches)
            except StopIteration:
                val_batches = batches(val_it)
                val = next(val_batches)
            metrics["val_ids"] = np.asarray(multihost_utils.process_allgather(val["id"])).tolist()
        saved = {"params": params, "opt": opt_state, "key": key, "step": i + 1} \
            if (i + 1) % 10 == 0 else None
        jaxnb.report(metrics, checkpoint=saved)


def test_a_resumed_run_continues_the_data_and_the_losses_exactly(engines, tmp_path):
    datasets = {"train": "resume_train", "val": "resume_val"}
    whole = engines.train(shuffled_regression, {"steps": 60}, name="whole", storage=tmp_path,
                          datasets=datasets)
    half = engines.train(shuffled_regression, {"steps": 30}, name="half", storage=tmp_path,
                         datasets=datasets)
    assert half.checkpoint.step == 30
    rest = engines.train(shuffled_regression, {"steps": 60}, name="half", storage=tmp_path,
                         datasets=datasets, resume=True)
    assert rest.error is None
    assert [h["step"] for h in rest.history] == list(range(31, 61))
    assert half.history + rest.history == whole.history  # same batches, val batches, losses
    losses = [h["loss"] for h in whole.history]
    assert losses[-1] < 0.2 * losses[0]
    epochs = [h["ids"] for h in whole.history[:24]]  # 50 rows per process: 12 batches an epoch
    assert epochs[:12] != epochs[12:]  # shuffled anew each epoch


def test_a_committed_step_carries_its_positions_without_the_log(engines, tmp_path):
    """The positions are in the checkpoint's step (committed with it): the log is not needed."""
    datasets = {"train": "resume_train", "val": "resume_val"}
    whole = engines.train(shuffled_regression, {"steps": 22}, name="w", storage=tmp_path,
                          datasets=datasets)
    engines.train(shuffled_regression, {"steps": 20}, name="cut", storage=tmp_path,
                  datasets=datasets)
    (tmp_path / "cut" / "datasets" / "process_0.jsonl").unlink()
    (tmp_path / "cut" / "datasets" / "process_1.jsonl").unlink()
    with capture_output() as shown:
        again = engines.train(shuffled_regression, {"steps": 22}, name="cut", storage=tmp_path,
                              datasets=datasets, resume=True)
    assert again.history == whole.history[20:]
    assert "no position saved" not in shown.stderr, shown.stderr


def from_the_start_or_not(config):
    """Reads its dataset only when the config says so (a checkpoint every 5 steps)."""
    import jaxnb

    rows = iter(jaxnb.get_dataset_shard("train").iter_batches(batch_size=4)) \
        if config["data"] else None
    checkpoint = jaxnb.get_checkpoint()
    for i in range(checkpoint.step if checkpoint else 0, config["steps"]):
        ids = next(rows)["id"].tolist() if rows else None
        jaxnb.report({"step": i + 1, "ids": ids},
                     checkpoint={"step": i + 1} if (i + 1) % 5 == 0 else None)


def test_a_resume_without_saved_positions_starts_the_data_from_the_beginning(engines, tmp_path):
    fresh = engines.train(from_the_start_or_not, {"steps": 2, "data": True}, name="fresh",
                          storage=tmp_path, datasets={"train": "resume_train"})
    engines.train(from_the_start_or_not, {"steps": 10, "data": False}, name="w", storage=tmp_path)
    with capture_output() as shown:
        again = engines.train(from_the_start_or_not, {"steps": 12, "data": True}, name="w",
                              storage=tmp_path, datasets={"train": "resume_train"}, resume=True)
    assert [h["ids"] for h in again.history] == [h["ids"] for h in fresh.history]
    said = [line for line in shown.stderr.splitlines() if "no position saved" in line]
    assert said == ["jaxnb: dataset 'train' has no position saved with the checkpoint of step 10 "
                    "(saved before its first iterator opened, or by a run without --datasets): its "
                    "batches start again from the beginning of an epoch"], shown.stderr


def test_a_resume_on_another_number_of_processes_is_refused_before_it_starts(engines, tmp_path):
    from jaxnb import JaxCluster

    datasets = {"train": "resume_train", "val": "resume_val"}
    engines.train(shuffled_regression, {"steps": 10}, name="two", storage=tmp_path,
                  datasets=datasets)
    with JaxCluster(n=1) as one:
        one.run(DATA_CELL)
        with pytest.raises(ValueError) as info:
            one.train(shuffled_regression, {"steps": 12}, name="two", storage=tmp_path,
                      datasets=datasets, resume=True)
    assert str(info.value) == (
        "the datasets' positions at step 10 were saved by 2 processes and this cluster has 1: "
        "they cannot be carried over exactly; resume on 2 processes, or start a new run "
        "(name='new')")  # the Python API's spelling, also in a message made on the engines
