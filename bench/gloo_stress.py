#!/usr/bin/env python
"""Stress benchmark for multi-process JAX on CPU with gloo collectives.

Launches L launches x 2 worker processes (this script in ``--worker`` mode),
each with K simulated CPU devices, running S steps of a small data-parallel
MLP (jit over a global batch sharded over all 2*K devices; gradient
all-reduce goes through gloo).  A launch that does not finish within
``--timeout`` seconds is counted as a hang; its workers are SIGKILLed
(whole process group) so nothing leaks. The summary is also written to
``bench/results/gloo_stress.json`` (each run replaces it; its command names the config).

Examples:
  python -m bench.gloo_stress --devices-per-process 2 --steps 100 --launches 7
  python -m bench.gloo_stress -K 2 --max-in-flight 2 --steps 300 --launches 20
  python -m bench.gloo_stress -K 2 --sync k --sync-every 4
  python -m bench.gloo_stress -K 2 --xla-flags=--xla_cpu_use_thunk_runtime=false

This is a benchmark harness only; it is not part of the jaxnb package.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


# --------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------
def worker(a: argparse.Namespace) -> None:
    import collections

    import jax
    import numpy as np

    if a.async_dispatch != "default":
        jax.config.update("jax_cpu_enable_async_dispatch", a.async_dispatch == "on")
    if a.collectives != "default":
        jax.config.update("jax_cpu_collectives_implementation", a.collectives)
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{a.port}",
        num_processes=2,
        process_id=a.process_id,
    )
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devs = jax.devices()
    assert len(devs) == 2 * a.devices_per_process, devs
    mesh = Mesh(np.array(devs), ("data",))
    repl = NamedSharding(mesh, P())
    data_sh = NamedSharding(mesh, P("data"))

    din, dh, dout = a.din, a.hidden, 10
    gb = a.per_device_batch * len(devs)          # global batch
    lb = gb // jax.process_count()                # process-local batch

    def init(key):
        k1, k2, k3 = jax.random.split(key, 3)
        def s(k, m, n):
            return jax.random.normal(k, (m, n)) / np.sqrt(m)
        return {"w1": s(k1, din, dh), "b1": jnp.zeros(dh),
                "w2": s(k2, dh, dh), "b2": jnp.zeros(dh),
                "w3": s(k3, dh, dout), "b3": jnp.zeros(dout)}

    opt = optax.adam(1e-3)
    params = jax.jit(init, out_shardings=repl)(jax.random.key(0))
    opt_state = jax.jit(opt.init, out_shardings=repl)(params)

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        logits = h @ p["w3"] + p["b3"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    rng = np.random.default_rng(1234 + a.process_id)
    wtrue = np.random.default_rng(0).normal(size=(din, dout)).astype(np.float32)

    def batch():
        x = rng.normal(size=(lb, din)).astype(np.float32)
        y = (x @ wtrue).argmax(-1).astype(np.int32)
        return (jax.make_array_from_process_local_data(data_sh, x),
                jax.make_array_from_process_local_data(data_sh, y))

    fixed = batch() if a.fixed_batch else None

    def one(params, opt_state):
        x, y = fixed if fixed is not None else batch()
        return step(params, opt_state, x, y)

    # warm-up / compile (fully synchronous)
    params, opt_state, loss = one(params, opt_state)
    float(loss)
    print("READY", flush=True)

    inflight: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for i in range(a.steps):
        params, opt_state, loss = one(params, opt_state)
        if a.sync == "every" or (a.sync == "k" and (i + 1) % a.sync_every == 0):
            float(loss)
        if a.max_in_flight > 0:
            inflight.append(loss)
            if len(inflight) > a.max_in_flight:
                inflight.popleft().block_until_ready()
        if a.progress and (i + 1) % a.progress == 0:
            print(f"DISPATCHED {i + 1}", flush=True)
    final = float(loss)
    jax.block_until_ready(params)
    dt = time.perf_counter() - t0
    print(f"RESULT steps_per_s={a.steps / dt:.3f} loss={final:.4f}", flush=True)
    jax.distributed.shutdown()
    print("SHUTDOWN-OK", flush=True)


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_argv(a: argparse.Namespace, pid: int, port: int) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--worker",
            "--process-id", str(pid), "--port", str(port),
            "-K", str(a.devices_per_process), "--steps", str(a.steps),
            "--sync", a.sync, "--sync-every", str(a.sync_every),
            "--max-in-flight", str(a.max_in_flight),
            "--async-dispatch", a.async_dispatch, "--collectives", a.collectives,
            "--per-device-batch", str(a.per_device_batch),
            "--din", str(a.din), "--hidden", str(a.hidden),
            "--progress", str(a.progress)]
    if a.fixed_batch:
        argv.append("--fixed-batch")
    return argv


def kill_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def one_launch(a: argparse.Namespace, logdir: str, n: int):
    """Returns (status, steps_per_s or None, tail). status: ok|hang|error."""
    port = free_port()
    env = dict(os.environ)
    env["JAX_NUM_CPU_DEVICES"] = str(a.devices_per_process)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    if a.xla_flags:
        env["XLA_FLAGS"] = a.xla_flags
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    procs, logs = [], []
    for pid in range(2):
        log = open(os.path.join(logdir, f"l{n}_p{pid}.log"), "w+")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen(worker_argv(a, pid, port), env=env,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    deadline = time.monotonic() + a.timeout
    hung = False
    try:
        for p in procs:
            left = deadline - time.monotonic()
            try:
                p.wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                hung = True
                break
    finally:
        for p in procs:
            kill_group(p)   # no-op on exited ones, SIGKILL group otherwise
    outs = []
    for log in logs:
        log.seek(0)
        outs.append(log.read())
        log.close()
    rates = []
    for o in outs:
        for line in o.splitlines():
            if line.startswith("RESULT"):
                rates.append(float(line.split()[1].split("=")[1]))
    tail = " | ".join(o.strip().splitlines()[-1] if o.strip() else "" for o in outs)
    if hung:
        # hang-init: before the timed loop; hang: inside the training loop;
        # hang-exit: both finished training (RESULT) but did not exit.
        if not all("READY" in o for o in outs):
            return "hang-init", None, tail
        if len(rates) == 2:
            return "hang-exit", min(rates), tail
        return "hang", None, tail
    if len(rates) != 2 or any(p.returncode != 0 for p in procs):
        return "error", None, tail
    return "ok", min(rates), tail


def describe(a: argparse.Namespace) -> str:
    s = f"K={a.devices_per_process} S={a.steps}"
    if a.sync == "every":
        s += " sync=every"
    elif a.sync == "k":
        s += f" sync=every{a.sync_every}"
    if a.max_in_flight:
        s += f" M={a.max_in_flight}"
    if a.async_dispatch != "default":
        s += f" async={a.async_dispatch}"
    if a.fixed_batch:
        s += " fixed-batch"
    if a.xla_flags:
        s += f" XLA_FLAGS='{a.xla_flags}'"
    for kv in a.env:
        s += f" {kv}"
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("-K", "--devices-per-process", type=int, default=2)
    ap.add_argument("-S", "--steps", type=int, default=100)
    ap.add_argument("-L", "--launches", type=int, default=5)
    ap.add_argument("--sync", choices=["none", "every", "k"], default="none")
    ap.add_argument("--sync-every", type=int, default=4)
    ap.add_argument("-M", "--max-in-flight", type=int, default=0,
                    help="block on the loss of step i-M (0 = unbounded)")
    ap.add_argument("--async-dispatch", choices=["default", "on", "off"],
                    default="default", help="jax_cpu_enable_async_dispatch")
    ap.add_argument("--collectives", choices=["default", "gloo", "mpi"],
                    default="default", help="jax_cpu_collectives_implementation")
    ap.add_argument("--xla-flags", default="", help="XLA_FLAGS for workers")
    ap.add_argument("--env", action="append", default=[],
                    help="extra KEY=VALUE for workers (repeatable)")
    ap.add_argument("--fixed-batch", action="store_true",
                    help="reuse one device batch instead of a new one per step")
    ap.add_argument("--per-device-batch", type=int, default=32)
    ap.add_argument("--din", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds per launch before it is declared hung")
    ap.add_argument("--progress", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()

    if a.worker:
        worker(a)
        return

    from bench._results import Results  # here: the workers run this file as a script

    results = Results("gloo_stress")
    name = describe(a)
    logdir = tempfile.mkdtemp(prefix="gloo_stress_")
    launches = []
    t_start = time.monotonic()
    for n in range(a.launches):
        st, rate, tail = one_launch(a, logdir, n)
        launches.append((st, rate))
        extra = f"{rate:.1f} steps/s" if rate is not None else tail[-200:]
        print(f"  launch {n + 1}/{a.launches}: {st:9s} {extra}", flush=True)
    hangs = sum(st in ("hang", "hang-init") for st, _ in launches)
    exit_hangs = sum(st == "hang-exit" for st, _ in launches)
    errs = sum(st == "error" for st, _ in launches)
    rates = [r for _, r in launches if r is not None]
    median_rate = statistics.median(rates) if rates else None
    med = f"{median_rate:.1f}" if rates else "-"
    seconds = time.monotonic() - t_start
    print(f"{'config':44s} {'launches':>8s} {'hangs':>5s} {'exit-hangs':>10s} "
          f"{'errors':>6s} {'median steps/s':>14s}")
    print(f"{name:44s} {a.launches:8d} {hangs:5d} {exit_hangs:10d} {errs:6d} {med:>14s}"
          f"   ({seconds:.0f}s)")
    results.add(config=name, launches=a.launches, hangs=hangs, exit_hangs=exit_hangs, errors=errs,
                median_steps_per_s=median_rate,
                runs=[{"status": st, "steps_per_s": rate} for st, rate in launches],
                seconds=seconds)
    results.write()
    if not a.keep_logs:
        import shutil
        shutil.rmtree(logdir, ignore_errors=True)
    else:
        print("logs in", logdir)


if __name__ == "__main__":
    main()
