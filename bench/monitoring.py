#!/usr/bin/env python
"""What jaxnb's monitoring of a training run costs: steps/s with it and without it.

Monitoring is what a run measures beside its reports: the time split (JAX's compile events,
data and checkpoint clocks), FLOPs per step (the jitted calls noted, XLA's cost analysis once),
and a sample of memory and time published about once a second (``MONITOR_KEY``), which the
dashboard shows. The baseline is the same run with it off (``jaxnb._engine.run.monitoring.
ENABLED = False`` on the engines). The loop is bench/train_throughput.py's data-parallel MLP
(2 processes of one CPU device, gloo), reporting every step; steps/s is measured inside the
loop after warm-up. Segments alternate (on, off, on, ...) so that load from other work hits
both alike; the ratio is the median of the per-round ratios (single rounds differ by several
per cent even on a quiet 2-core machine: run 7 or more), and the ratio of the medians is shown
beside it. Target: >= 0.98 (monitoring costs at most 2 % of steps/s). It also says how long
taking the samples took on each process (their own thread's time, over the run's time), and
how much of a core the notebook's side used with monitoring and without (it receives the
samples and draws them; on a small machine it shares the cores with the engines): on a loaded
machine the ratio is noisy, those are not.

    python -m bench.monitoring [--steps 400] [--rounds 7]

Figures: bench/results/monitoring.json (bench/_results.py).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

from bench._results import Results
from jaxnb._core.contract import EngineCall
from jaxnb._core.goodput import ENGINE_PARTS

TARGET = 0.98
OWN_COST = EngineCall("jaxnb._engine.run.monitoring:own_cost")


def loop(config: dict) -> None:
    """The loop under jaxnb, reporting every step; its steps/s go out as a last report."""
    import jaxnb
    from bench.train_throughput import make_trainer

    run = make_trainer(config)
    jaxnb.report({"bench": run(config["steps"], jaxnb.report)})


def segment(cluster, config: dict, monitored: bool, storage: str,
            name: str) -> tuple[float, float, float]:
    """One run with monitoring on or off: its steps/s (measured in the loop, after warm-up), the
    share of the run's time its processes spent taking samples (0 when off), and the share of
    one core the notebook's side used meanwhile (its CPU time over the run's wall time: on a
    small machine the notebook shares the cores with the engines)."""
    cluster.run(f"import jaxnb._engine.run.monitoring as _m; _m.ENABLED = {monitored}")
    wall, cpu = time.perf_counter(), time.process_time()
    result = cluster.train(loop, config, storage=storage, name=name)
    notebook = (time.process_time() - cpu) / (time.perf_counter() - wall)
    if not monitored:
        assert result.flops_per_step is None, "monitoring was not off"
        return float(result.metrics["bench"]["steps_per_s"]), 0.0, notebook
    assert result.goodput is not None and result.flops_per_step, "monitoring was not on"
    costs = cluster.view.apply_sync(OWN_COST)
    shares = [c["seconds"] / sum(result.goodput["processes"][p][k] for k in ENGINE_PARTS)
              for p, c in enumerate(costs)]
    return float(result.metrics["bench"]["steps_per_s"]), max(shares), notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="measured steps per segment")
    parser.add_argument("--warmup", type=int, default=20, help="steps before measuring")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of (on, off)")
    parser.add_argument("--hidden", type=int, default=512, help="MLP width")
    args = parser.parse_args()

    from jaxnb import JaxCluster

    config = {"din": 256, "hidden": args.hidden, "batch": 256, "warmup": args.warmup, "steps": args.steps}
    results = Results("monitoring")
    load_before = results.load_at_start
    rounds = []
    root = str(pathlib.Path(__file__).resolve().parents[1])  # the engines import bench.train_throughput
    with tempfile.TemporaryDirectory() as storage, JaxCluster(n=2, devices_per_process=1,
                                                              spares=0) as cluster:
        cluster.run(f"import sys; sys.path.insert(0, {root!r})")
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            got = {m: segment(cluster, config, m, storage, f"r{r}-{'on' if m else 'off'}") for m in order}
            (on, sampling, notebook_on), (off, _, notebook_off) = got[True], got[False]
            rounds.append({"on": on, "off": off, "ratio": on / off, "sampling_share": sampling,
                           "notebook_cpu_on": notebook_on, "notebook_cpu_off": notebook_off})
            print(f"round {r + 1}: with monitoring {on:.1f} steps/s, without {off:.1f} steps/s, "
                  f"ratio {on / off:.3f}; sampling took {100 * sampling:.2f}% of the run's time; "
                  f"the notebook's side used {100 * notebook_on:.1f}% of a core with it, "
                  f"{100 * notebook_off:.1f}% without", flush=True)
        cluster.run("import jaxnb._engine.run.monitoring as _m; _m.ENABLED = True")
    ratio = statistics.median(r["ratio"] for r in rounds)
    sampling = statistics.median(r["sampling_share"] for r in rounds)
    on_median = statistics.median(r["on"] for r in rounds)
    off_median = statistics.median(r["off"] for r in rounds)
    notebook = {m: statistics.median(r[f"notebook_cpu_{m}"] for r in rounds) for m in ("on", "off")}
    verdict = "met" if ratio >= TARGET else "MISSED"
    print(f"monitoring: median ratio {ratio:.3f} of steps/s without it (target >= {TARGET}: {verdict}); "
          f"with {on_median:.1f}, without {off_median:.1f} steps/s (ratio of the medians "
          f"{on_median / off_median:.3f}); load average "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after; taking the samples "
          f"(on their own thread) took {100 * sampling:.2f}% of the run's time (median); the "
          f"notebook's side used {100 * notebook['on']:.1f}% of a core with it, "
          f"{100 * notebook['off']:.1f}% without")
    results.add(config=config, rounds=rounds, median_ratio=ratio, target=TARGET, verdict=verdict,
                median_sampling_share=sampling, ratio_of_medians=on_median / off_median,
                notebook_cpu_share=notebook)
    results.write()


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"took {time.time() - started:.0f} s")
