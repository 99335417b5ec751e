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
4. how soon a pruned trial ends: a search whose first 2 trials are good and the
   others bad, of steps that end in an all-reduce (the processes go in step) and
   ``report()`` every step, with no ``should_stop()`` (a Ray loop as written). For
   each pruned trial: the reports made after the pruner's verdict (``pruned_time``),
   before every process ended at the same report, and the time from the verdict to
   that last report (goal: one report or 50 ms, whichever is later); also the reports
   from the judged one to the end (the verdict's trip: batched report -> notebook ->
   pruner). No report waits for the verdict: the stop goes pruner -> signal, then the
   processes agree (key-value store) and end at their next report.

    python -m bench.tune [--trials 8] [--steps 200] [--fresh 4] [--prune-trials 6] [--prune-steps 20000]
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

from bench._results import Results

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


#: A step that ends in an all-reduce over every process's device (they go in step), no should_stop().
PRUNE_SETUP = """
import time
import jax
import jax.numpy as jnp
import numpy as np
import jaxnb
from jax.sharding import NamedSharding, PartitionSpec

def bench_pruned(config):
    mesh = jax.make_mesh((jax.device_count(),), ("d",))
    ones = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")),
                                                  np.ones(jax.local_device_count(), np.float32))
    total = jax.jit(lambda v: v.sum())
    for step in range(1, config["steps"] + 1):
        float(total(ones))
        jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step, "t": time.time()})
"""


def good_then_bad(trial):
    """The first 2 trials near the optimum, the others far: the median pruner stops those."""
    if trial.number < 2:
        return {"x": trial.suggest_float("x", 1.9, 2.1)}
    return {"x": trial.suggest_float("x_far", 8.0, 9.0)}


def prune_latency(cluster, trials: int, storage: str, results: Results, steps: int = 20_000) -> None:
    """Section 4: reports and engine time from the judged report to the end of each pruned trial."""
    cluster.run(PRUNE_SETUP)
    with quiet():
        search = cluster.tune("bench_pruned", good_then_bad, trials=trials, metric="loss",
                              config={"steps": steps}, pruner="median", storage=storage,
                              name="prune", seed=0)
    steps_ms, judged_after, overrun, overrun_ms, within = [], [], [], [], []
    for t in search.trials:
        times = {h["step"]: h["t"] for h in t.history}
        if t.state == "COMPLETE":  # whole runs: the step time after warm-up dominates
            steps_ms.append((max(times.values()) - min(times.values())) / (len(times) - 1) * 1e3)
        if t.state != "PRUNED" or t.pruned_time is None:
            continue
        end = t.stopped_at or max(times)
        judged_after.append(end - t.pruned_at)
        later = [s for s, at in times.items() if at > t.pruned_time]
        ms = max(times[end] - t.pruned_time, 0.0) * 1e3
        overrun.append(len(later))
        overrun_ms.append(ms)
        within.append(len(later) <= 1 or ms <= 50.0)
    states = [t.state for t in search.trials]
    print(f"pruning: {trials} trials of up to {steps} steps (all-reduce + report, no should_stop); "
          f"states {states}")
    results.add(prune_states=states)
    if not overrun:
        print("pruning: no trial was pruned")
        return
    step = statistics.median(steps_ms)
    results.add(prune_step_ms=step, prune_reports_after_judged=judged_after,
                prune_overrun_reports=overrun, prune_overrun_ms=overrun_ms,
                prune_overrun_ms_median=statistics.median(overrun_ms),
                prune_within_goal=all(within))
    print(f"step time (median over the completed trials)     : {step:8.3f} ms")
    print(f"reports after the verdict, per pruned trial      : {overrun}")
    print(f"verdict -> last report, engine time              : "
          f"{', '.join(f'{ms:.1f}' for ms in overrun_ms)} ms (goal: 1 report or <= 50 ms; "
          f"met: {all(within)})")
    print(f"reports after the judged one (verdict's trip)    : {judged_after}")


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
    parser.add_argument("--prune-trials", type=int, default=6,
                        help="trials of the pruning search (section 4; 0: skip it)")
    parser.add_argument("--prune-steps", type=int, default=20_000,
                        help="steps of each trial of the pruning search (a loaded machine: fewer)")
    args = parser.parse_args()

    from jaxnb import JaxCluster, tune

    results = Results("tune")
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
        if args.prune_trials:
            prune_latency(cluster, args.prune_trials, storage, results, args.prune_steps)
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
    results.add(trials=args.trials, steps=args.steps, states=states, gap_tune_ms=g_tune * 1000,
                gap_loop_ms=g_loop * 1000, gap_fresh_ms=g_fresh * 1000,
                cpu_per_report_tune_us=tune_cpu / n_tune * 1e6,
                cpu_per_report_loop_us=loop_cpu / n_loop * 1e6, steps_ratio=r_tune / r_loop)
    results.write()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
