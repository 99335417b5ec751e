"""Train loops for the tests of stopping a run (a Ray loop as written, a loop of fast steps) and
where each process says it ended.

Each loop appends, on every process, one JSON line per run to ``f"{config['log']}.{rank}"``
when it ends (its ``finally``): ``last`` (the step of its last report, or the one that ended
it), ``after_loop`` (the code after the loop ran) and, for the fast loop, ``seen`` (the first
step at whose top the stop request had reached this process).
"""

from __future__ import annotations

import json
import pathlib

#: Run in the notebook: the loops are sent to the engines with each run.
LOOPS = '''
def ray_loop(config):
    """A Ray Train loop as written: report() every step, never should_stop()."""
    import json, time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    rank = jaxnb.get_context().get_world_rank()
    step, after_loop = 0, False
    try:
        for step in range(1, config["steps"] + 1):
            multihost_utils.process_allgather(jnp.ones(1))  # an SPMD step: the processes go in step
            jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step, "t": time.time()})
            if step == 3 and config.get("flag"):
                open(config["flag"], "a").close()  # under way: a test may stop it now
            time.sleep(config["sleep"])
        after_loop = True
    finally:
        with open(f"{config['log']}.{rank}", "a") as f:
            f.write(json.dumps({"x": config["x"], "last": step, "after_loop": after_loop}) + "\\n")


def fast_steps(config):
    """Tutorial 06's shape with fast steps: should_stop() at every step, an all-reduce, a report."""
    import json, time
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    import jaxnb
    from jaxnb._engine.run import stopping
    mesh = jax.make_mesh((jax.device_count(),), ("d",))
    ones = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")),
                                                  np.ones(jax.local_device_count(), np.float32))
    total = jax.jit(lambda v: v.sum())
    rank = jaxnb.get_context().get_world_rank()
    step = last = 0
    seen, after_loop = None, False
    try:
        for step in range(1, config["steps"] + 1):
            if seen is None and stopping.requested():
                seen = step
            if jaxnb.should_stop():
                break
            float(total(ones))  # waits for every process: they go in step
            last = step
            jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step, "t": time.time()})
        after_loop = True
    finally:
        with open(f"{config['log']}.{rank}", "a") as f:
            f.write(json.dumps({"x": config["x"], "last": last, "seen": seen,
                                "after_loop": after_loop}) + "\\n")
'''


def ends(log: pathlib.Path, processes: int = 2) -> list[tuple[dict, ...]]:
    """For each run, in order: what every process wrote when it ended (process 0 first)."""
    by_process = [[json.loads(line) for line in pathlib.Path(f"{log}.{p}").read_text().splitlines()]
                  for p in range(processes)]
    assert len({len(runs) for runs in by_process}) == 1, by_process
    return list(zip(*by_process, strict=True))
