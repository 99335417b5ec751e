#!/usr/bin/env python
"""Training under ``JaxCluster.train`` vs the same loop as a plain 2-process script.

One command, every number measured in the same run, on the same machine:

1. throughput: a small data-parallel MLP (jax + optax; gradients all-reduced
   over gloo), steps/s measured inside the loop after warm-up. Under jaxnb
   the loop calls ``jaxnb.report({"loss": loss, "step": i})`` every step with
   the dashboard live in this process; the plain script (two subprocesses
   with ``jax.distributed``, same environment as jaxnb's engines) does not
   report. Runs alternate (plain, jaxnb, plain, ...) to spread out noise;
   the ratio is median(jaxnb) / median(plain). Target >= 0.95.
2. latency at 100 reports/s: each report's engine time vs the time the
   notebook booked it into the Result (same machine, same clock). Target p95
   <= 100 ms.
3. start-up: ``train()`` call -> first report booked in the notebook, vs the
   plain script's launch -> first step done (and its init -> first step).

    python bench/train_throughput.py [--steps 400] [--repeats 5]
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the training loop (runs on the engines, or in the plain workers) ------------------


def mlp_loop(config: dict) -> dict:
    """``steps`` steps of a data-parallel MLP; steps/s after ``warmup`` steps."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    report = None
    if config["jaxnb"]:
        import jaxnb

        report = jaxnb.report
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
    params = jax.jit(init, out_shardings=repl)(jax.random.key(0))
    opt_state = jax.jit(opt.init, out_shardings=repl)(params)
    rng = np.random.default_rng(jax.process_index())
    xs = rng.normal(size=(local_batch, din)).astype(np.float32)
    ys = rng.integers(0, dout, size=local_batch).astype(np.int32)
    x = jax.make_array_from_process_local_data(data_sh, xs)
    y = jax.make_array_from_process_local_data(data_sh, ys)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    first = start = 0.0
    for i in range(config["steps"]):
        params, opt_state, loss = step(params, opt_state, x, y)
        if report is not None:
            report({"loss": loss, "step": i})
        if i == 0:
            loss.block_until_ready()
            first = time.time()
        elif i == config["warmup"]:
            loss.block_until_ready()
            start = time.perf_counter()
    jax.block_until_ready(params)
    rate = (config["steps"] - 1 - config["warmup"]) / (time.perf_counter() - start)
    return {"steps_per_s": rate, "first_step_time": first}


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


def jaxnb_loop(config: dict) -> None:
    """``mlp_loop`` under jaxnb; its measurements go out as one last report."""
    import jaxnb

    jaxnb.report({"bench": mlp_loop(config)})


# ---- the plain script ---------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    launched = float(os.environ["BENCH_LAUNCHED"])
    import jax

    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=2,
                               process_id=args.process_id, initialization_timeout=120)
    ready = time.time()
    out = mlp_loop(json.loads(args.config))
    if args.process_id == 0:
        out.update(launched=launched, ready=ready)
        print("RESULT " + json.dumps(out), flush=True)
    jax.distributed.shutdown()


def plain_run(config: dict, env: dict[str, str], timeout: float = 600) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **env, "BENCH_LAUNCHED": repr(time.time())}
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--port", str(port),
            "--config", json.dumps({**config, "jaxnb": False})]
    procs = [subprocess.Popen([*argv, "--process-id", str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for line in outs[0].splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError("plain run failed:\n" + "\n".join(o[-2000:] for o in outs))


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
    result = cluster.train(jaxnb_loop, {**config, "jaxnb": True}, storage=storage)
    out = dict(result.history[-1]["bench"])
    out["first_booked"] = booked.pairs[0][1] - called
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5, help="plain/jaxnb pairs")
    parser.add_argument("--din", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rate", type=float, default=100.0, help="reports/s for the latency probe")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency probe")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    from jaxnb import JaxCluster
    from jaxnb._launch import engine_environment

    config = {k: getattr(args, k) for k in ("steps", "warmup", "din", "hidden", "batch")}
    storage = tempfile.mkdtemp(prefix="jaxnb-bench-")
    booked = Booked()
    with JaxCluster(n=2) as cluster:
        env = engine_environment(cluster.options, tempfile.gettempdir())
        env.pop("JAXNB_STACKS_DIR", None)
        print(f"MLP {args.din}-{args.hidden}-{args.hidden}-10, global batch {args.batch}, "
              f"{args.steps} steps ({args.warmup} warm-up), 2 processes x "
              f"{env.get('JAX_NUM_CPU_DEVICES', '?')} CPU device(s), {os.cpu_count()} cores")
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        plain, under = [], []
        for r in range(args.repeats):
            plain.append(plain_run(config, env))
            under.append(jaxnb_run(cluster, config, booked, os.path.join(storage, str(r))))
            print(f"  run {r}: plain {plain[-1]['steps_per_s']:.1f} steps/s, "
                  f"jaxnb {under[-1]['steps_per_s']:.1f} steps/s")
        booked.pairs.clear()
        cluster.train(paced_reports, {"rate": args.rate, "seconds": args.seconds},
                      storage=os.path.join(storage, "latency"))
        latency = sorted(1000 * (got - sent) for sent, got in booked.pairs)

    print(f"load average at end: {os.getloadavg()[0]:.2f} (other work on the machine skews "
          "every number below)")
    p_rate = statistics.median(p["steps_per_s"] for p in plain)
    j_rate = statistics.median(u["steps_per_s"] for u in under)
    pair = statistics.median(
        u["steps_per_s"] / p["steps_per_s"] for p, u in zip(plain, under, strict=True))
    p_first = statistics.median(p["first_step_time"] - p["launched"] for p in plain)
    p_ready = statistics.median(p["first_step_time"] - p["ready"] for p in plain)
    j_first = statistics.median(u["first_booked"] for u in under)
    p95 = latency[int(0.95 * (len(latency) - 1))]
    print(f"throughput: jaxnb {j_rate:.1f} vs plain {p_rate:.1f} steps/s (medians) -> "
          f"ratio {j_rate / p_rate:.3f}; median of paired ratios {pair:.3f} (target >= 0.95)")
    print(f"latency at {args.rate:g} reports/s ({len(latency)} reports): "
          f"p50 {latency[len(latency) // 2]:.1f} ms, p95 {p95:.1f} ms, max {latency[-1]:.1f} ms "
          "(target p95 <= 100 ms)")
    print(f"start-up: train() -> first report in the notebook {j_first:.2f} s; plain script "
          f"launch -> first step {p_first:.2f} s (of which init -> first step {p_ready:.2f} s)")


if __name__ == "__main__":
    main()
