#!/usr/bin/env python
"""``%%jax_profile``: what tracing costs a step, and how long after the cell the table shows.

One command, both numbers measured in the same run on the same 2-process cluster:

1. overhead: the same jitted data-parallel step (a matmul over every device, then an
   all-reduce), timed on the engines step by step, in a plain ``%%jax_cluster`` cell
   and in a ``%%jax_profile`` cell (``jax.profiler``'s default options: host, Python
   and device tracers). Rounds alternate plain/profiled so that load from other work
   hits both alike; the figure is the median over rounds of (profiled / plain − 1).
2. end of cell → table shown: from the moment the cell's last process finished to
   the step table being displayed (stop together, files pulled over the engines,
   merge, step table, timeline PNG), with the time of each stage.
3. clock error: ``ProfileResult.clock_error_ms`` of process 1 in each profiled round (how far
   its events may sit off process 0's on the merged timeline), with its measured offset
   (two processes on one host share one clock, so the true offset is 0).

Also written to ``bench/results/profile.json``.

    python -m bench.profile [--steps 30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time

from bench._results import Results
from jaxnb import JaxCluster
from jaxnb._profile import session

SETUP = """\
import time, jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
_mesh = jax.make_mesh((jax.device_count(),), ("d",))
_x = jax.device_put(jnp.ones((jax.device_count() * 64, 512)), NamedSharding(_mesh, P("d")))
_w = jnp.ones((512, 512)) / 512
_f = jax.jit(lambda x, w: jnp.tanh(x @ w).sum())
_f(_x, _w).block_until_ready()

def run_steps(n):
    times = []
    for i in range(n):
        t = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            _f(_x, _w).block_until_ready()
        times.append(time.perf_counter() - t)
    return times
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    stages: dict[str, list[float]] = {k: [] for k in ("stop", "collect", "show", "total")}
    marks: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            out = fn(*a, **k)
            marks[name] = time.perf_counter()
            return out
        return wrapper

    session.spmd.run_cell = timed("cell", session.spmd.run_cell)
    session._stop_all = timed("stop", session._stop_all)
    session.collect = timed("collect", session.collect)
    session.showing.show = timed("show", session.showing.show)

    plain, profiled, errors, offsets = [], [], [], []
    results = Results("profile")
    with tempfile.TemporaryDirectory() as storage, JaxCluster(n=2) as cluster:
        cluster.run(SETUP)
        for _ in range(args.rounds):
            cluster.run(f"_t = run_steps({args.steps})")
            plain.append(statistics.median(cluster.pull("_t")[1:]))
            with contextlib.redirect_stdout(io.StringIO()):
                traced = cluster.profile(f"_t = run_steps({args.steps})", storage=storage)
            errors.append(traced.clock_error_ms[1])
            offsets.append(traced.clock_offsets_ms[1])
            profiled.append(statistics.median(cluster.pull("_t")[1:]))
            stages["stop"].append(marks["stop"] - marks["cell"])
            stages["collect"].append(marks["collect"] - marks["stop"])
            stages["show"].append(marks["show"] - marks["collect"])
            stages["total"].append(marks["show"] - marks["cell"])
    ratios = [p / q - 1 for p, q in zip(profiled, plain, strict=True)]
    print(f"step, plain %%jax_cluster:   {statistics.median(plain) * 1e3:7.2f} ms (median)")
    print(f"step, under %%jax_profile:   {statistics.median(profiled) * 1e3:7.2f} ms (median)")
    print(f"tracing overhead per step:  {statistics.median(ratios) * 100:+7.1f} % "
          f"(rounds: {', '.join(f'{r * 100:+.0f}%' for r in ratios)})")
    print(f"end of cell -> table shown: {statistics.median(stages['total']):7.2f} s (median of "
          f"{args.rounds}; stop {statistics.median(stages['stop']):.2f} s, fetch+merge+steps "
          f"{statistics.median(stages['collect']):.2f} s, table+timeline "
          f"{statistics.median(stages['show']):.2f} s)")
    print(f"clock error, process 1:     {statistics.median(errors):7.2f} ms median, "
          f"{min(errors):.2f}–{max(errors):.2f} ms over rounds (measured offset "
          f"{min(offsets):+.2f} to {max(offsets):+.2f} ms; one host, so the true offset is 0)")
    results.add(
        steps=args.steps, rounds=args.rounds,
        step_plain_ms=statistics.median(plain) * 1e3,
        step_profiled_ms=statistics.median(profiled) * 1e3,
        overhead_percent=statistics.median(ratios) * 100,
        overhead_percent_rounds=[r * 100 for r in ratios],
        cell_end_to_table_s=statistics.median(stages["total"]),
        stages_s={k: statistics.median(v) for k, v in stages.items()},
        clock_error_ms={"median": statistics.median(errors), "min": min(errors),
                        "max": max(errors), "rounds": errors},
        clock_offset_ms_rounds=offsets,
    )
    results.write()


if __name__ == "__main__":
    main()
