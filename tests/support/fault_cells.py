"""Cells the fault-injection tests and ``bench/failures.py`` run on the engines.

SETUP defines ``total(v)``: an all-reduce over every device of every process.
"""

SETUP = """\
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

def make_mesh():
    return jax.make_mesh((jax.device_count(),), ("i",))

mesh = make_mesh()

def _sum(x):
    return x.sum()

def total(v):
    local = np.full((jax.local_device_count(),), v, np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local)
    return jax.jit(_sum, out_shardings=NamedSharding(mesh, P()))(x)
"""
#: A loop of blocking all-reduces (a host sync every step).
SYNC_LOOP = """\
x = total(1.0)
for step in range(10**7):
    x = total(float(x) / jax.device_count())
"""
#: A loop of all-reduces dispatched without host syncs: many are in flight in XLA.
ASYNC_LOOP = """\
step = jax.jit(lambda y: y - y.mean() + 1.0, out_shardings=NamedSharding(mesh, P("i")))
y = jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("i")), np.ones((jax.local_device_count(),), np.float32))
for i in range(10**7):
    y = step(y)
"""
#: Sum of (process index + 1) over the local devices of two 1-device processes.
EXPECTED = 3.0
VERIFY = "print('total', float(total(jax.process_index() + 1.0)))"
#: Both processes busy: process 0 waits in a collective that process 1, spinning in Python, never joins.
WEDGED = "if jax.process_index() == 0:\n    total(1.0)\nelse:\n    while True: sum(range(1000))"


#: A training loop for recovery tests (``%jax_train counting --max-failures N``): a
#: collective per step, a checkpoint every 5 steps, ``config["flag"]`` written by process 0
#: at step ``config["say_at"]`` (the moment to kill a process). Defined by a %%jax_cluster
#: cell, it comes back on new engines through replay.
COUNTING_LOOP = """\
def counting(config):
    import time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    start = 0
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        start = int(checkpoint.restore()["step"])
    for step in range(start + 1, config["steps"] + 1):
        total = multihost_utils.process_allgather(jnp.ones(1)).sum()
        saved = {"step": step} if step % 5 == 0 else None
        jaxnb.report({"step": step, "total": total, "square": step * step}, checkpoint=saved)
        if step == config["say_at"] and jaxnb.get_context().get_world_rank() == 0:
            open(config["flag"], "a").close()
        time.sleep(config["pause"])
"""
