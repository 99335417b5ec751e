"""The seed pages' loops (Ray's JAX quickstart, Kubeflow's MNIST) with the model built the way
each page builds it: a run preempted part way and resumed reports exactly what a straight run
reports. Lines marked ``# added`` are the checkpoint and resume that the pages do not have."""

from __future__ import annotations

import pytest


def ray_quickstart(config):
    """Ray Train's JAX quickstart ``train_func``, ``ray.train`` -> ``jaxnb``; eager, uncommitted
    arrays as on the page (``jax.random.normal``, ``optimizer.init``)."""
    import jax
    import jax.numpy as jnp
    import optax

    import jaxnb

    key = jax.random.PRNGKey(jax.process_index())
    X = jax.random.normal(key, (100, 1))
    noise = jax.random.normal(key, (100, 1)) * 0.1
    y = 2 * X + 1 + noise

    def linear_model(params, x):
        return x @ params["w"] + params["b"]

    def loss_fn(params, x, y):
        preds = linear_model(params, x)
        return jnp.mean((preds - y) ** 2)

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss

    key, w_key, b_key = jax.random.split(key, 3)
    params = {"w": jax.random.normal(w_key, (1, 1)), "b": jax.random.normal(b_key, (1,))}
    optimizer = optax.adam(learning_rate=0.01)
    opt_state = optimizer.init(params)

    start = 0  # added: resume
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        restored = checkpoint.restore({"params": params, "opt_state": opt_state})
        params, opt_state, start = restored["params"], restored["opt_state"], checkpoint.step

    epochs = 40
    for epoch in range(start, epochs):
        params, opt_state, loss = train_step(params, opt_state, X, y)
        saved = {"params": params, "opt_state": opt_state} if (epoch + 1) % 10 == 0 else None
        jaxnb.report({"loss": float(loss), "epoch": epoch, "step": epoch + 1}, checkpoint=saved)
        if epoch + 1 == config.get("preempt_after", 0):  # added
            return


DIGITS_CELL = """
from sklearn.datasets import load_digits
digits = load_digits()
mnist_train = {"image": (digits.images / 16.0).astype("float32")[..., None],
               "label": digits.target.astype("int32")}
"""


def kubeflow_mnist(config):
    """Kubeflow Trainer's JAX guide ``train_mnist_jax``: a linen CNN, ``TrainState``,
    ``device_put_replicated`` and ``pmap``; tfds MNIST -> ``get_dataset_shard`` (scikit-learn's
    8x8 digits, so nothing is downloaded); jaxnb initialises ``jax.distributed`` itself."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn
    from flax.training import train_state

    import jaxnb

    local_device_count = jax.local_device_count()

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(features=32, kernel_size=(3, 3))(x)
            x = nn.relu(x)
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.Dense(128)(x)
            x = nn.relu(x)
            x = nn.Dense(10)(x)
            return x

    ds = jaxnb.get_dataset_shard("train")  # was: tfds.load("mnist", ...).batch(128).prefetch(1)

    model = CNN()
    rng = jax.random.PRNGKey(0)
    params = model.init(rng, jnp.ones([1, 8, 8, 1]))["params"]
    tx = optax.adam(1e-3)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    # was: jax.device_put_replicated(state, jax.local_devices()), gone in JAX 0.10
    state = jax.tree.map(lambda x: jnp.stack([x] * local_device_count), state)

    def loss_fn(params, batch):
        images, labels = batch
        logits = model.apply({"params": params}, images)
        onehot = jax.nn.one_hot(labels, 10)
        return optax.softmax_cross_entropy(logits, onehot).mean()

    grad_fn = jax.value_and_grad(loss_fn)

    @jax.pmap
    def train_step(state, batch):
        loss, grads = grad_fn(state.params, batch)
        state = state.apply_gradients(grads=grads)
        return state, loss

    first_epoch = 0  # added: resume
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        state, first_epoch = checkpoint.restore(state), checkpoint.step

    for epoch in range(first_epoch, 4):  # was: range(5)
        for batch in ds.iter_batches(batch_size=128, local_shuffle_buffer_size=1000,
                                     local_shuffle_seed=0):
            images = batch["image"].reshape((local_device_count, -1, 8, 8, 1))
            labels = batch["label"].reshape((local_device_count, -1))
            state, loss = train_step(state, (images, labels))
        jaxnb.report({"step": epoch + 1, "loss": float(loss.mean())},  # was: print(...)
                     checkpoint=state)  # added
        if epoch + 1 == config.get("preempt_after", 0):  # added
            return


def _straight_and_resumed(cluster, fn, tmp_path, preempt_after, **kw):
    whole = cluster.train(fn, {}, name="whole", storage=tmp_path, **kw)
    first = cluster.train(fn, {"preempt_after": preempt_after}, name="cut", storage=tmp_path, **kw)
    rest = cluster.train(fn, {}, name="cut", storage=tmp_path, resume=True, **kw)
    assert whole.error is None and rest.error is None
    return whole, first, rest


def test_ray_quickstart_resumes_exactly(cluster, tmp_path):
    whole, first, rest = _straight_and_resumed(cluster, ray_quickstart, tmp_path, 25)
    assert first.checkpoint.step == 20
    assert rest.history == whole.history[20:]  # uncommitted arrays came back uncommitted
    assert whole.history[-1]["loss"] < whole.history[0]["loss"]


@pytest.fixture
def digits(cluster):
    cluster.run(DIGITS_CELL)
    return cluster


def test_kubeflow_mnist_resumes_exactly_at_an_epoch_boundary(digits, tmp_path):
    whole, first, rest = _straight_and_resumed(digits, kubeflow_mnist, tmp_path, 2,
                                               datasets={"train": "mnist_train"})
    assert first.checkpoint.step == 2
    assert rest.history == whole.history[2:]  # epochs 3 and 4: the next epochs' shuffles
    assert whole.history[-1]["loss"] < whole.history[0]["loss"]
