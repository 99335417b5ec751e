"""The compilation cache: the first step of the same ``%jax_train`` after ``restart --replay``
against a cold compile, in one run.

    python -m bench.compile_cache [--repeats 3]

Per repeat: a new 2-process × 2-device cluster with an empty cache folder runs the recovery
bench's Flax MLP loop (``bench/_mlp.py``) for 3 steps (cold: everything compiled, and written);
then ``restart(replay=True)`` (new processes, the setup replayed) and the same run again (its
programs read from the cache). The first step is timed on the engine, from the function's start
to its first report: building the model and optimizer state, compiling (or reading) every
program they and the step need, and the step. Goal: warm ≤ 0.3 × cold. Prints medians; writes
``bench/results/compile_cache.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile

from bench._mlp_cell import DEVICES, SETUP_CELL
from bench._results import Results


def first_steps(config):
    """Three steps of the MLP; the first report carries the seconds from the start to it."""
    import time

    import jax

    import jaxnb
    from bench import _mlp

    began = time.perf_counter()
    rank, n = jaxnb.get_context().get_world_rank(), jaxnb.get_context().get_world_size()
    rows, params, opt_state, step_fn = _mlp.on_devices(jax.devices())
    for step in range(1, 4):
        params, opt_state, loss = step_fn(params, opt_state, *_mlp.global_batch(step, rank, n, rows))
        if step == 1:
            jax.block_until_ready(loss)  # the step computed, not only dispatched
        seconds = time.perf_counter() - began if step == 1 else None
        jaxnb.report({"step": step, "first_step_s": seconds})


def one_round(folder: str) -> tuple[float, float, dict]:
    """Cold then warm first step (process 0's), and the cache as the warm processes saw it."""
    from jaxnb import JaxCluster

    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    with quiet, JaxCluster(n=2, devices_per_process=DEVICES, spares=0,
                           compile_cache=os.path.join(folder, "xla")) as cluster:
        cluster.run(SETUP_CELL)
        cold = cluster.train(first_steps, {}, name="cold", storage=folder)
        cluster.restart(replay=True)
        warm = cluster.train(first_steps, {}, name="warm", storage=folder)
        cache = cluster.status()[0].compile_cache or {}
    return cold.history[0]["first_step_s"], warm.history[0]["first_step_s"], cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results, rounds = Results("compile_cache"), []
    print(f"load average at the start: {results.load_at_start}")
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="jaxnb-bench-cache-") as folder:
            rounds.append(one_round(folder))
    cold = statistics.median(r[0] for r in rounds)
    warm = statistics.median(r[1] for r in rounds)
    ratio = statistics.median(r[1] / r[0] for r in rounds)
    cache = rounds[-1][2]
    print(f"first step of the same run, 2 processes x {DEVICES} devices (median of {args.repeats}): "
          f"cold compile {cold:.2f} s ({', '.join(f'{r[0]:.2f}' for r in rounds)}); after restart "
          f"--replay, from the cache {warm:.2f} s ({', '.join(f'{r[1]:.2f}' for r in rounds)}); "
          f"ratio {ratio:.2f} (goal <= 0.3)")
    print(f"the warm run's process 0: {cache.get('hits')} hits of {cache.get('lookups')} lookups, "
          f"{cache.get('saved_seconds')} s of compiling saved (JAX counts whole seconds: programs "
          f"compiled in under 1 s count 0); {cache.get('entries')} entries, "
          f"{cache.get('bytes')} bytes in the folder")
    results.add(cold_s=round(cold, 3), warm_s=round(warm, 3), ratio=round(ratio, 3), rounds=rounds)
    results.write()


if __name__ == "__main__":
    main()
