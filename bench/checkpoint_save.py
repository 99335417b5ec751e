#!/usr/bin/env python
"""Saving a ~100 MB replicated parameter pytree from 2 processes: jaxnb vs Orbax.

Two JAX processes (``jax.distributed``, one CPU device each) hold the same
parameters (8 float32 arrays of random values, 100 MB in all) and, each round,
in turn:

1. ``orbax``: Orbax's ``CheckpointManager`` saves them as global arrays
   replicated over both processes (``NamedSharding(mesh, P())``), as jaxnb
   did before host-local leaves were supported (the baseline);
2. ``jaxnb global``: ``CheckpointStore.save`` of the same global arrays;
3. ``jaxnb host-local``: ``CheckpointStore.save`` of plain per-process ``jnp``
   arrays with the same values (fingerprints compared, written once).

The three take turns going first. Times are from a barrier before the save to
its return on process 0 (every save ends with Orbax's barriers); medians over
the rounds, and the median of per-round ratios. Bytes are the step folder's file sizes. Targets: time
<= 1.2x Orbax's, bytes <= 1.05x one copy (Orbax's own folder).
Also written to ``bench/results/checkpoint_save.json``.

    python -m bench.checkpoint_save [--mb 100] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._results import Results

WORKER = r"""
import json, os, sys, time, traceback
import jax, numpy as np
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from jax.experimental import multihost_utils

port, pid, root, mb, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid, initialization_timeout=60)
import orbax.checkpoint as ocp
from jaxnb._engine.checkpoint.store import CheckpointStore


def size(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def main():
    per = mb * 1_000_000 // 8 // 4
    rng = np.random.default_rng(0)  # the same values on both processes
    host = {f"layer{i}": rng.standard_normal(per, dtype=np.float32) for i in range(8)}
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices())
    replicated = NamedSharding(mesh, P())
    global_tree = {k: jax.device_put(v, replicated) for k, v in host.items()}
    local_tree = {k: jnp.asarray(v) for k, v in host.items()}
    jax.block_until_ready((global_tree, local_tree))
    options = ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False)
    orbax = ocp.CheckpointManager(os.path.join(root, "orbax"), options=options,
                                  item_handlers=ocp.StandardCheckpointHandler())
    stores = {"jaxnb global": CheckpointStore(os.path.join(root, "global"), keep=2),
              "jaxnb host-local": CheckpointStore(os.path.join(root, "local"), keep=2)}

    def save_orbax(step):
        orbax.save(step, args=ocp.args.StandardSave(global_tree))
        orbax.wait_until_finished()
        return os.path.join(root, "orbax", str(step))

    cases = {
        "orbax": save_orbax,
        "jaxnb global": lambda step: stores["jaxnb global"].save(step, global_tree).path,
        "jaxnb host-local": lambda step: stores["jaxnb host-local"].save(step, local_tree).path,
    }
    times = {name: [] for name in cases}
    sizes = {}
    for step in range(rounds + 1):  # round 0 warms up (compiles, first directories)
        names = list(cases)
        names = names[step % 3:] + names[: step % 3]  # each goes first in turn
        for name in names:
            save = cases[name]
            multihost_utils.sync_global_devices(f"{name}{step}")
            t0 = time.perf_counter()
            path = save(step)
            dt = time.perf_counter() - t0
            if step:
                times[name].append(dt)
                sizes[name] = size(path) if pid == 0 else 0
    from jaxnb._engine.checkpoint import leaves as cl
    from jaxnb._engine.checkpoint import plan

    fp_times = []
    for _ in range(rounds):  # what the host-local save adds: classify + fingerprint every leaf
        t0 = time.perf_counter()
        plan.fingerprints([cl.prepare(k, v, 2) for k, v in local_tree.items()])
        fp_times.append(time.perf_counter() - t0)
    times["(fingerprints alone)"] = fp_times
    orbax.close()
    for s in stores.values():
        s.close()
    print(json.dumps({"times": times, "bytes": sizes, "raw": 8 * per * 4}))


try:
    main()
except BaseException:
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)
jax.distributed.shutdown()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    results = Results("checkpoint_save")
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1",
               PYTHONPATH=f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "worker.py")
        script.write_text(WORKER)
        port = _free_port()
        procs = [subprocess.Popen([sys.executable, str(script), str(port), str(i), tmp,
                                   str(args.mb), str(args.rounds)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
        outs = [p.communicate(timeout=600) for p in procs]
    for i, (p, (_, err)) in enumerate(zip(procs, outs, strict=True)):
        if p.returncode:
            sys.exit(f"process {i} failed:\n{err[-3000:]}")
    result = json.loads(outs[0][0].strip().splitlines()[-1])
    times, sizes, raw = result["times"], result["bytes"], result["raw"]
    base = times["orbax"]
    print(f"{raw / 1e6:.0f} MB replicated over 2 processes, {len(base)} rounds "
          f"(median; ratio = median of per-round ratios)\n")
    print("| save | time [s] | vs Orbax | bytes written | vs Orbax's bytes | vs raw |")
    print("|---|---:|---:|---:|---:|---:|")
    fingerprints = times.pop("(fingerprints alone)")
    saves = {}
    for name, ts in times.items():
        save = saves[name] = {
            "time_s": statistics.median(ts),
            "time_ratio_vs_orbax": statistics.median(t / b for t, b in zip(ts, base, strict=True)),
            "bytes": sizes[name], "bytes_ratio_vs_orbax": sizes[name] / sizes["orbax"],
            "bytes_ratio_vs_raw": sizes[name] / raw, "runs_s": ts}
        print(f"| {name} | {save['time_s']:.3f} | {save['time_ratio_vs_orbax']:.2f}× | "
              f"{sizes[name] / 1e6:.1f} MB | {save['bytes_ratio_vs_orbax']:.3f}× | "
              f"{save['bytes_ratio_vs_raw']:.3f}× |")
    print(f"\nfingerprints of every host-local leaf, per process: {statistics.median(fingerprints):.3f} s")
    results.add(raw_bytes=raw, processes=2, rounds=len(base), saves=saves,
                fingerprints_s=statistics.median(fingerprints),
                target={"time_ratio_vs_orbax": "<= 1.2", "bytes_ratio_vs_orbax": "<= 1.05"})
    results.write()


if __name__ == "__main__":
    main()
