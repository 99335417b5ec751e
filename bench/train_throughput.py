#!/usr/bin/env python
"""Training under ``JaxCluster.train`` vs the same loop as a plain 2-process script.

One command, every number measured in the same run, on the same machine:

1. throughput: a small data-parallel MLP (jax + optax; gradients all-reduced
   over gloo), steps/s measured inside the loop after warm-up. Under jaxnb
   the loop calls ``jaxnb.report({"loss": loss, "step": i})`` every step with
   the live dashboard in this process. The plain script (two processes with
   ``jax.distributed``, the engines' environment, no notebook, no report)
   runs the loop twice per round: with unbounded dispatch, and blocking on
   the loss of MAX_IN_FLIGHT steps ago as ``jaxnb.report`` does. The plain
   processes stay up and segments alternate (plain, plain bounded, jaxnb,
   ...) so that load from other work hits all alike; ratios are medians of
   the per-round ratios. Target >= 0.95.
2. latency at 100 reports/s: each report's engine time vs the time the
   notebook booked it into the Result (same machine, same clock). Target p95
   <= 100 ms.
3. start-up: ``train()`` call -> first report booked in the notebook, vs the
   plain script's launch -> first step done (and its init -> first step).
4. the cost of one ``jaxnb.report`` on the training thread: inside one run on the
   engines, rounds alternate a plain loop and the same loop with ``report()`` every
   step, of a no-op step (a JAX scalar from a trivial jitted step, and a Python
   float with no step at all); cost = (loop with reports - plain loop) / steps,
   wall time (what the training thread loses, the publisher thread's share of the
   interpreter included), the training thread's CPU time and the engine's (every
   thread: the publisher's copies and sends included); medians over rounds. On a loaded
   machine the wall time stretches by the load; the CPU times hold.
   Target <= 25 us.

Also written to ``bench/results/train_throughput.json``.

    python -m bench.train_throughput [--steps 300] [--repeats 8] [--only report-cost]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench._report_cost import cost_of_a_report
from jaxnb._engine.run.in_flight import MAX_IN_FLIGHT

# ---- the training loop (runs on the engines, or in the plain processes) ---------------


def make_trainer(config: dict):
    """Set up a data-parallel MLP; returns ``run(steps, report)`` -> steps/s after warm-up."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    din, hidden, dout = config["din"], config["hidden"], 10
    mesh = jax.make_mesh((jax.device_count(),), ("data",), devices=jax.devices())
    repl, data_sh = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    local_batch = config["batch"] // jax.process_count()

    def init(key):
        k1, k2, k3 = jax.random.split(key, 3)

        def dense(k, m, n):
            return jax.random.normal(k, (m, n)) / np.sqrt(m), jnp.zeros(n)

        return [dense(k1, din, hidden), dense(k2, hidden, hidden), dense(k3, hidden, dout)]

    def loss_fn(params, x, y):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return optax.softmax_cross_entropy_with_integer_labels(x @ w + b, y).mean()

    opt = optax.adam(1e-3)
    rng = np.random.default_rng(jax.process_index())
    xs = rng.normal(size=(local_batch, din)).astype(np.float32)
    ys = rng.integers(0, dout, size=local_batch).astype(np.int32)
    x = jax.make_array_from_process_local_data(data_sh, xs)
    y = jax.make_array_from_process_local_data(data_sh, ys)
    state = {"params": jax.jit(init, out_shardings=repl)(jax.random.key(0)), "first": 0.0}
    state["opt"] = jax.jit(opt.init, out_shardings=repl)(state["params"])

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def run(steps: int, report=None, in_flight: int = 0) -> dict:
        """``in_flight`` > 0: block on the loss of that many steps ago (as jaxnb does)."""
        params, opt_state = state["params"], state["opt"]
        start, losses = 0.0, []
        for i in range(config["warmup"] + steps):
            params, opt_state, loss = step(params, opt_state, x, y)
            if report is not None:
                report({"loss": loss, "step": i})
            if in_flight:
                losses.append(loss)
                if len(losses) > in_flight:
                    losses.pop(0).block_until_ready()
            if not state["first"]:
                loss.block_until_ready()
                state["first"] = time.time()
            if i == config["warmup"] - 1:
                loss.block_until_ready()
                start = time.perf_counter()
        jax.block_until_ready(params)
        state["params"], state["opt"] = params, opt_state
        return {"steps_per_s": steps / (time.perf_counter() - start),
                "first_step_time": state["first"]}

    return run


def jaxnb_loop(config: dict) -> None:
    """The loop under jaxnb, reporting every step; its measurements go out as a last report."""
    import jaxnb

    run = make_trainer(config)
    jaxnb.report({"bench": run(config["steps"], jaxnb.report)})


def paced_reports(config: dict) -> None:
    """Report at ``rate`` reports/s for ``seconds`` (the latency probe)."""
    import time

    import jaxnb

    period, n = 1.0 / config["rate"], int(config["rate"] * config["seconds"])
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        jaxnb.report({"i": i, "loss": 1.0 / (i + 1)})


# ---- the plain script ---------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """One plain process: set up once, then run a segment per ``run N`` line on stdin."""
    launched = float(os.environ["BENCH_LAUNCHED"])
    import jax

    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=2,
                               process_id=args.process_id, initialization_timeout=120)
    ready = time.time()
    run = make_trainer(json.loads(args.config))
    for line in sys.stdin:
        if not line.startswith("run "):
            break
        _, steps, in_flight = line.split()
        out = run(int(steps), in_flight=int(in_flight))
        if args.process_id == 0:
            print("RESULT " + json.dumps({**out, "launched": launched, "ready": ready}),
                  flush=True)
    sys.stdout.flush()
    os._exit(0)  # no shutdown barrier: the two processes leave one after the other


class PlainScript:
    """Two plain processes with ``jax.distributed`` (no notebook), kept for every segment."""

    def __init__(self, config: dict, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, **env, "BENCH_LAUNCHED": repr(time.time())}
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--port", str(port),
                "--config", json.dumps(config)]
        self.procs = [
            subprocess.Popen([*argv, "--process-id", str(i)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                             text=True)
            for i in range(2)
        ]

    def run(self, steps: int, in_flight: int = 0) -> dict:
        for p in self.procs:
            p.stdin.write(f"run {steps} {in_flight}\n")
            p.stdin.flush()
        for line in self.procs[0].stdout:
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise RuntimeError("the plain script ended early")

    def close(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stdin.close()
                p.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
                p.wait()


# ---- jaxnb --------------------------------------------------------------------------------


class Booked:
    """Records (engine report time, notebook booking time) of process 0's reports."""

    def __init__(self) -> None:
        from jaxnb._train.monitor import Monitor

        self.pairs: list[tuple[float, float]] = []
        original = Monitor._book

        def book(monitor, records):
            now = time.time()
            self.pairs.extend((r["time"], now) for r in records)
            original(monitor, records)

        Monitor._book = book


def jaxnb_run(cluster, config: dict, booked: Booked, storage: str) -> dict:
    booked.pairs.clear()
    called = time.time()
    with contextlib.redirect_stdout(io.StringIO()):  # the dashboard's displays (no notebook here)
        result = cluster.train(jaxnb_loop, config, storage=storage)
    out = dict(result.history[-1]["bench"])
    out["first_booked"] = booked.pairs[0][1] - called
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="measured steps per segment")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=8, help="plain/jaxnb segment pairs")
    parser.add_argument("--din", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rate", type=float, default=100.0, help="reports/s for the latency probe")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency probe")
    parser.add_argument("--cost-steps", type=int, default=20000,
                        help="steps per loop of section 4 (the cost of a report)")
    parser.add_argument("--cost-rounds", type=int, default=15, help="rounds of section 4")
    parser.add_argument("--only", choices=["report-cost"], help="run only that section")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    from bench._results import Results  # here: the plain processes run this file as a script
    from jaxnb import JaxCluster
    from jaxnb._hosts import site
    from jaxnb._lifecycle.launch import engine_environment

    results = Results("train_throughput")
    config = {k: getattr(args, k) for k in ("steps", "warmup", "din", "hidden", "batch")}
    storage = tempfile.mkdtemp(prefix="jaxnb-bench-")
    booked = Booked()
    if args.only == "report-cost":
        with JaxCluster(n=2) as cluster:
            cost_of_a_report(cluster, args, storage, results)
        results.write()
        return
    with JaxCluster(n=2) as cluster:
        cost_of_a_report(cluster, args, storage, results)
        env = engine_environment(cluster.options, tempfile.gettempdir(), site.of(cluster.group))
        env.pop("JAXNB_STACKS_DIR", None)
        print(f"MLP {args.din}-{args.hidden}-{args.hidden}-10, global batch {args.batch}, "
              f"{args.repeats} x {args.steps} measured steps (+{args.warmup} warm-up), "
              f"2 processes x {env.get('JAX_NUM_CPU_DEVICES', '?')} CPU device(s), "
              f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
        script = PlainScript(config, env)
        try:
            plain, bounded, under = [], [], []
            for r in range(args.repeats):
                plain.append(script.run(args.steps))
                bounded.append(script.run(args.steps, in_flight=MAX_IN_FLIGHT))
                under.append(jaxnb_run(cluster, config, booked, os.path.join(storage, str(r))))
                print(f"  round {r}: plain {plain[-1]['steps_per_s']:.1f}, plain bounded "
                      f"{bounded[-1]['steps_per_s']:.1f}, jaxnb {under[-1]['steps_per_s']:.1f} "
                      "steps/s", flush=True)
        finally:
            script.close()
        booked.pairs.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            cluster.train(paced_reports, {"rate": args.rate, "seconds": args.seconds},
                          storage=os.path.join(storage, "latency"))
        latency = sorted(1000 * (got - sent) for sent, got in booked.pairs)

    def paired(base: list[dict]) -> float:
        return statistics.median(
            u["steps_per_s"] / b["steps_per_s"] for b, u in zip(base, under, strict=True))

    def median(runs: list[dict]) -> float:
        return statistics.median(r["steps_per_s"] for r in runs)
    p_first = plain[0]["first_step_time"] - plain[0]["launched"]
    p_ready = plain[0]["first_step_time"] - plain[0]["ready"]
    j_first = statistics.median(u["first_booked"] for u in under)
    p95 = latency[int(0.95 * (len(latency) - 1))]
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (other work skews the numbers)")
    print(f"throughput (median steps/s): jaxnb {median(under):.1f}, plain {median(plain):.1f}, "
          f"plain with {MAX_IN_FLIGHT} steps in flight {median(bounded):.1f}")
    print(f"  jaxnb / plain: median paired ratio {paired(plain):.3f} (target >= 0.95); "
          f"jaxnb / plain bounded: {paired(bounded):.3f}")
    print(f"latency at {args.rate:g} reports/s ({len(latency)} reports): "
          f"p50 {latency[len(latency) // 2]:.1f} ms, p95 {p95:.1f} ms, max {latency[-1]:.1f} ms "
          "(target p95 <= 100 ms)")
    print(f"start-up: train() -> first report in the notebook {j_first:.2f} s (median); plain "
          f"script launch -> first step {p_first:.2f} s (init -> first step {p_ready:.2f} s)")
    results.add(
        config={**config, "repeats": args.repeats, "processes": 2,
                "cpu_devices_per_process": env.get("JAX_NUM_CPU_DEVICES")},
        jaxnb_steps_per_s=median(under), plain_steps_per_s=median(plain),
        plain_bounded_steps_per_s=median(bounded), max_in_flight=MAX_IN_FLIGHT,
        rounds_steps_per_s={"jaxnb": [u["steps_per_s"] for u in under],
                            "plain": [p["steps_per_s"] for p in plain],
                            "plain_bounded": [b["steps_per_s"] for b in bounded]},
        ratio=paired(plain), ratio_vs_plain_bounded=paired(bounded), target=">= 0.95",
        latency={"reports_per_s": args.rate, "reports": len(latency),
                 "p50_ms": latency[len(latency) // 2], "p95_ms": p95, "max_ms": latency[-1],
                 "target": "p95 <= 100 ms"},
        startup_s={"jaxnb_train_to_first_report": j_first,
                   "plain_launch_to_first_step": p_first,
                   "plain_init_to_first_step": p_ready},
    )
    results.write()


if __name__ == "__main__":
    main()
