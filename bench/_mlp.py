"""The model and step both sides of ``bench.recovery`` train: a Flax NNX MLP with Adam, data
drawn from the step number (a resumed run sees the same batches). Plain Flax and Optax:
imported by jaxnb's engines (through the setup cell) and by Ray's workers alike."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

FEATURES, HIDDEN, OUTPUTS, BATCH = 64, 512, 16, 64


class MLP(nnx.Module):
    """Three dense layers."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(FEATURES, HIDDEN, rngs=rngs)
        self.l2 = nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)
        self.l3 = nnx.Linear(HIDDEN, OUTPUTS, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l3(nnx.relu(self.l2(nnx.relu(self.l1(x)))))


def make(seed: int = 0):
    """The model's graph, its parameters, the optimizer and its state."""
    graphdef, params = nnx.split(MLP(nnx.Rngs(seed)), nnx.Param)
    optimizer = optax.adam(1e-3)
    return graphdef, params, optimizer, optimizer.init(params)


def step_function(graphdef, optimizer):
    """The jitted training step: ``(params, opt_state, x, y) -> (params, opt_state, loss)``."""

    def loss_fn(params, x, y):
        return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def batch(step: int, rows: int = BATCH, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``offset .. offset+rows`` of step ``step``'s batch (the same in every run)."""
    rng = np.random.default_rng([step, offset])
    x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
    return x, np.tanh(x[:, :OUTPUTS] * 2.0)


def on_devices(devices):
    """The model, data-parallel over ``devices``: the batch's sharding, the parameters and
    optimizer state (replicated) and the jitted step."""
    mesh = Mesh(np.array(devices), ("data",))
    rows, same = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    graphdef, params, optimizer, opt_state = make()
    params, opt_state = jax.device_put((params, opt_state), same)
    return rows, params, opt_state, step_function(graphdef, optimizer)


def global_batch(step: int, rank: int, processes: int, rows):
    """Step ``step``'s batch as global arrays laid out by ``rows``, each process its own part."""
    local = BATCH // processes
    x, y = batch(step, local, rank * local)
    return (jax.make_array_from_process_local_data(rows, x, (BATCH, x.shape[1])),
            jax.make_array_from_process_local_data(rows, y, (BATCH, y.shape[1])))
