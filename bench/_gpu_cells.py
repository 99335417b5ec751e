"""The cells ``bench/gpu_check.py`` runs on the engines: the H200 run's bf16 MLP, its training
function (a report every step, a checkpoint and a self-inflicted SIGKILL when asked), a plain
loop to compare with, and 10 profiled steps.

The model is data-parallel over every device (the weights replicated, the batch split), so each
device computes ``batch`` rows: its FLOPs per step are ``(3·layers - 1)·2·batch·width²`` (the
forward GEMMs, the weight gradients, and the input gradients of every layer but the first).
"""

from __future__ import annotations

#: ``.format(width=, layers=, batch=, plain_steps=)``: the model, its data and its jitted step.
MODEL = """
import os, signal, time
import numpy as np, jax, jax.numpy as jnp, jaxnb
from jax.sharding import NamedSharding, PartitionSpec as P
WIDTH, LAYERS, BATCH, PLAIN_STEPS = {width}, {layers}, {batch}, {plain_steps}
mesh = jax.make_mesh((jax.device_count(),), ("data",))
_rng = np.random.default_rng(0)  # the same weights on every process
params = jax.device_put([jnp.asarray(_rng.standard_normal((WIDTH, WIDTH)) / WIDTH ** 0.5, jnp.bfloat16)
                         for _ in range(LAYERS)], NamedSharding(mesh, P()))
_local = np.random.default_rng(jax.process_index()).standard_normal((BATCH * jax.local_device_count(), WIDTH))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), _local.astype(jnp.bfloat16))
_kind = str(jax.local_devices()[0].device_kind)

def loss_fn(ws, x):
    for w in ws:
        x = jnp.tanh(x @ w)
    return jnp.mean(x.astype(jnp.float32) ** 2)

@jax.jit
def step(ws, x):
    loss, grads = jax.value_and_grad(loss_fn)(ws, x)
    return [w - 1e-3 * g for w, g in zip(ws, grads)], loss

def profiled(n):
    w = params
    for i in range(n):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w, _ = step(w, x)
            jax.block_until_ready(w)
"""

#: The training function: a report every step (its time, and at the end the engine's own steps/s
#: after 20 warm steps), a checkpoint every ``every`` steps, the last process SIGKILLed at
#: ``kill_at`` in the first attempt.
TRAIN = """
def train(config):
    ws, start = params, 0
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        state = checkpoint.restore()
        ws, start = state["ws"], int(state["step"])
    every, kill_at, given = config.get("every"), config.get("kill_at"), step if config.get("give") else None
    warm = None
    for i in range(start + 1, config["steps"] + 1):
        ws, loss = step(ws, x)
        metrics = {"loss": loss, "t": time.time()}
        if i == start + 20:
            jax.block_until_ready(ws)
            warm = time.perf_counter()
        if i == config["steps"] and warm is not None:
            jax.block_until_ready(ws)
            metrics["engine_steps_per_s"] = (i - start - 20) / (time.perf_counter() - warm)
        saved = {"ws": ws, "step": i} if every and i % every == 0 else None
        jaxnb.report(metrics, checkpoint=saved, step_fn=given)
        last = jax.process_index() == jax.process_count() - 1
        if kill_at and i == kill_at and last and checkpoint is None:
            os.kill(os.getpid(), signal.SIGKILL)
"""

#: A plain loop that never waits on the device: 3 rounds of PLAIN_STEPS after 20 warm steps.
PLAIN = """
_plain_rates, _w = [], params
for _ in range(20):
    _w, _ = step(_w, x)
jax.block_until_ready(_w)
for _round in range(3):
    _t = time.perf_counter()
    for _ in range(PLAIN_STEPS):
        _w, _ = step(_w, x)
    jax.block_until_ready(_w)
    _plain_rates.append(PLAIN_STEPS / (time.perf_counter() - _t))
del _w
"""
