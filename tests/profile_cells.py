"""Cells the %%jax_profile tests run on the engines."""

#: STEPS steps over every device; process SLOW sleeps 50 ms per step in host code (−1: none).
STEPS_CELL = """\
import time, jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
_mesh = jax.make_mesh((jax.device_count(),), ("d",))
_x = jax.device_put(jnp.ones((jax.device_count() * 4, 128)), NamedSharding(_mesh, P("d")))
_f = jax.jit(lambda x: jnp.tanh(x @ jnp.ones((128, 128))).sum())
for _i in range({steps}):
    with jax.profiler.StepTraceAnnotation("train", step_num=_i):
        if jax.process_index() == {slow}:
            time.sleep(0.05)
        _f(_x).block_until_ready()
print("steps done")
"""

#: Two steps, then every process raises.
RAISES_CELL = STEPS_CELL.format(steps=2, slow=-1) + "raise ValueError('boom after 2 steps')\n"
