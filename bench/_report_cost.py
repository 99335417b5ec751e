"""Section 4 of ``bench/train_throughput.py``: the cost of one ``jaxnb.report`` on the training thread.

Inside one run on the engines, rounds alternate a plain loop and the same loop with
``report()`` every step, of a no-op step (see that bench's docstring).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the engines need not import bench


def report_cost(config: dict) -> None:
    """Section 4, on the engines: rounds of a plain no-op loop beside the same loop reporting."""
    import time

    import jax
    import jax.numpy as jnp

    import jaxnb

    inc = jax.jit(lambda x: x + 1)
    n, found = config["steps"], {"jax": [], "float": []}

    def loop(kind: str, reporting: bool, base: int) -> tuple[float, float]:
        report = jaxnb.report
        x = jnp.float32(0) if kind == "jax" else 0.0
        wall, cpu, everything = time.perf_counter(), time.thread_time(), time.process_time()
        if kind == "jax":
            for i in range(base, base + n):
                x = inc(x)
                if reporting:
                    report({"loss": x, "step": i})
            x.block_until_ready()
        else:
            for i in range(base, base + n):
                if reporting:
                    report({"loss": 0.5, "step": i})
        return (time.perf_counter() - wall, time.thread_time() - cpu,
                time.process_time() - everything)

    step = 1
    for r in range(config["rounds"] + 1):
        for kind in found:
            plain = loop(kind, False, step)
            reported = loop(kind, True, step)
            step += n
            if r:  # the first round warms up (compiles, fills caches)
                found[kind].append([(reported[k] - plain[k]) / n * 1e6 for k in (0, 1, 2)]
                                   + [plain[0] / n * 1e6])
    jaxnb.report({"report_cost": found, "step": step})


def cost_of_a_report(cluster, args: argparse.Namespace, storage: str, results) -> None:
    """Section 4: the cost of one report on the training thread (process 0's figures)."""
    with contextlib.redirect_stdout(io.StringIO()):
        result = cluster.train(report_cost, {"steps": args.cost_steps, "rounds": args.cost_rounds},
                               storage=os.path.join(storage, "report_cost"))
    found = result.history[-1]["report_cost"]
    figures = {}
    for kind, rounds in found.items():
        wall, cpu, process, plain = (statistics.median(r[k] for r in rounds) for k in range(4))
        figures[kind] = {"wall_us": wall, "thread_cpu_us": cpu, "process_cpu_us": process,
                         "plain_step_us": plain, "rounds_wall_us": [r[0] for r in rounds]}
        print(f"cost of a report, {kind:5s} metric: {wall:6.1f} us wall, {cpu:6.1f} us CPU of the "
              f"training thread, {process:6.1f} us CPU of the engine (the publisher's included) "
              f"(median of {len(rounds)} rounds x {args.cost_steps} steps; plain step "
              f"{plain:.1f} us; target <= 25 us); load {os.getloadavg()[0]:.2f}", flush=True)
    results.add(report_cost={**figures, "steps": args.cost_steps, "rounds": args.cost_rounds,
                             "target": "<= 25 us"})
