#!/usr/bin/env python
"""#34 on a real GPU: the memory table, an out-of-memory error explained, and MFU.

Run on a machine with NVIDIA GPUs and a CUDA JAX (``pip install -U "jax[cuda12]"``), from the
repository root. It starts one engine per GPU (``--platform gpu``) and prints:

1. ``JaxCluster.memory()``: per device, bytes in use, peak and limit from ``memory_stats()``;
2. the error of an allocation 1.5x the device's limit on the last process, as explained;
3. a 30-step bf16 matmul run: its FLOPs per step (XLA's cost analysis), FLOP/s and MFU with the
   denominator (the dashboard's text).

    python -m bench.gpu_check [--size 8192] [--steps 30]

It prints what it saw; nothing is asserted. Every section says so when it cannot run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

SETUP = """
import jax, jax.numpy as jnp, numpy as np, jaxnb
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ("data",))
weights = jax.device_put(jnp.ones((SIZE, SIZE), jnp.bfloat16), NamedSharding(mesh, P()))
LIMIT = jax.local_devices()[0].memory_stats()["bytes_limit"]

@jax.jit
def step(w, x):
    return (x @ w @ w.T).astype(jnp.bfloat16)

def train(config):
    x = jnp.ones((SIZE, SIZE), jnp.bfloat16)
    for i in range(config["steps"]):
        x = step(weights, x) * 1e-4
        jaxnb.report({"step": i + 1, "batch_size": SIZE})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="matrix size of the MFU run")
    parser.add_argument("--steps", type=int, default=30, help="steps of the MFU run")
    args = parser.parse_args()

    import jaxnb

    try:
        cluster = jaxnb.JaxCluster(platform="gpu", spares=0).start()
    except Exception as exc:
        print(f"no GPU cluster here: {str(exc).splitlines()[0]}")
        sys.exit(1)
    with cluster, tempfile.TemporaryDirectory() as storage:
        print(f"== {cluster.num_processes} process(es): {[p.local_devices for p in cluster.processes]}")
        cluster.run(SETUP.replace("SIZE", str(args.size)))

        print("\n== 1. JaxCluster.memory()")
        print(cluster.memory().text())

        print("\n== 2. an allocation 1.5x the device's limit, on the last process")
        last = cluster.num_processes - 1
        try:
            cluster.run(f"if jax.process_index() == {last}:\n"
                        "    too_much = jnp.ones((int(LIMIT * 1.5),), jnp.uint8)\n")
            print("no error: the allocation fitted (unexpected)")
        except jaxnb.RemoteError as exc:
            print(exc)  # the explanation: one line, the arrays, what to try, XLA's text

        print("\n== 3. MFU of a bf16 matmul step")
        try:
            cluster.reset()
            cluster.run(SETUP.replace("SIZE", str(args.size)))
            result = cluster.train("train", {"steps": args.steps}, storage=storage, name="mfu")
            print(f"flops_per_step: {result.flops_per_step}; expected about "
                  f"{2 * 2 * args.size ** 3:.4g} (two matmuls, replicated: each device does both)")
            print(f"goodput: {result.goodput}")
            print(f"memory: {result.memory}")
        except Exception as exc:
            print(f"the run failed: {exc}")


if __name__ == "__main__":
    main()
