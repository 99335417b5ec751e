#!/usr/bin/env python
"""``%jax_tune`` (``JaxCluster.tune``) vs a fresh cluster per trial, in the same run.

Every trial runs the same small jitted step on 2 processes and reports every
step with the engine's clock (``t``). Measured, medians over trials:

1. overhead between trials: engine time of trial k's last report -> trial
   k+1's first report, for (a) ``tune`` on one warm cluster (Optuna asks and
   tells, journal storage, the live view, the pruner fed every report),
   (b) a hand-written loop of ``JaxCluster.train`` calls on the same cluster,
   (c) what a launcher-per-trial tool does: start 2 fresh processes per trial
   (``JaxCluster(n=2)``, define the step, train, stop). Target for (a): <= 0.5 s.
2. kernel CPU per report (this process's CPU time, all threads, / reports):
   (a) vs (b), i.e. what Optuna and the tune view add per report.
3. steps/s inside a trial, (a) vs (b). Target >= 0.95.

    python -m bench.tune [--trials 8] [--steps 200] [--fresh 4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

SETUP = """
import time
import jax
import jax.numpy as jnp
import jaxnb

@jax.jit
def _bench_step(w, lr):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((w @ w.T - 1.0) ** 2))(w)
    return w - lr * g, loss

def bench_trial(config):
    w = jnp.full((64, 64), 0.01)
    for i in range(config["steps"]):
        if jaxnb.should_stop():
            break
        w, loss = _bench_step(w, config["lr"])
        jaxnb.report({"loss": loss, "step": i + 1, "t": time.time()})
"""


def gaps(histories: list[list[dict]]) -> list[float]:
    """Engine time from each trial's last report to the next trial's first."""
    return [b[0]["t"] - a[-1]["t"] for a, b in itertools.pairwise(histories) if a and b]


def rates(histories: list[list[dict]]) -> list[float]:
    return [(len(h) - 1) / (h[-1]["t"] - h[0]["t"]) for h in histories if len(h) > 1]


def quiet():
    """Widgets and dashboards display as text outside a kernel: keep the terminal readable."""
    return contextlib.redirect_stdout(io.StringIO())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fresh", type=int, default=4, help="trials with a fresh cluster each")
    args = parser.parse_args()

    from jaxnb import JaxCluster, tune

    config = {"steps": args.steps, "lr": 1e-3}
    storage = tempfile.mkdtemp(prefix="jaxnb-bench-tune-")
    with JaxCluster(n=2) as cluster:
        cluster.run(SETUP)
        with quiet():
            cluster.train("bench_trial", config, storage=storage, name="warmup")  # compile once
        cpu = time.process_time()
        with quiet():
            search = cluster.tune("bench_trial", {"lr": tune.loguniform(1e-4, 1e-2)},
                                  trials=args.trials, config=config, pruner="median",
                                  storage=storage, name="search", seed=0)
        tune_cpu = time.process_time() - cpu
        tuned = [t.history for t in search.trials]
        cpu = time.process_time()
        loop = []
        with quiet():
            for k in range(args.trials):
                loop.append(cluster.train("bench_trial", config, storage=storage,
                                          name=f"loop{k}").history)
        loop_cpu = time.process_time() - cpu
    fresh = []
    for _ in range(args.fresh):
        with JaxCluster(n=2) as cluster, quiet():
            cluster.run(SETUP)
            fresh.append(cluster.train("bench_trial", config, storage=storage,
                                       name=f"fresh{len(fresh)}").history)

    g_tune, g_loop, g_fresh = (statistics.median(gaps(h)) for h in (tuned, loop, fresh))
    n_tune, n_loop = sum(map(len, tuned)), sum(map(len, loop))
    r_tune, r_loop = statistics.median(rates(tuned)), statistics.median(rates(loop))
    states = [t.state for t in search.trials]
    print(f"trials: {args.trials} x {args.steps} steps on 2 processes; states {states}")
    print(f"overhead between trials, tune on a warm cluster : {g_tune * 1000:8.1f} ms "
          f"(target <= 500 ms)")
    print(f"overhead between trials, loop of train() calls   : {g_loop * 1000:8.1f} ms")
    print(f"overhead between trials, fresh cluster per trial : {g_fresh * 1000:8.1f} ms")
    print(f"ratio tune / fresh cluster                       : {g_tune / g_fresh:8.3f}")
    print(f"kernel CPU per report, tune                      : {tune_cpu / n_tune * 1e6:8.1f} us")
    print(f"kernel CPU per report, loop of train()           : {loop_cpu / n_loop * 1e6:8.1f} us")
    print(f"steps/s in a trial, tune / train loop            : {r_tune:.0f} / {r_loop:.0f} = "
          f"{r_tune / r_loop:.3f} (target >= 0.95)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
