"""Recovery from a dead process: jaxnb's ``--max-failures`` against Ray Train's, in one run.

    python -m bench.recovery [--repeats 3] [--no-ray]

Measures, on a local 2-process CPU cluster:

- restart: ``JaxCluster.restart()`` with warm spares (registered beforehand: only a
  join) and without (``spares=0``: stop, start, join ``jax.distributed``);
- recovery: a small checkpointed loop (a collective and a gradient step per step,
  a checkpoint every 5 steps) whose process 1 SIGKILLs itself at step 12, run with
  ``max_failures=1``: kill → first report after the resume, split into detect (kill →
  death seen), restart, replay (one setup cell), restore (in the loop) and first step,
  with spares and without;
- Ray Train (``pip install -e ".[bench]"``), in the same run: see :mod:`bench._ray_recovery`.

Prints medians and the ratio jaxnb ÷ Ray (target ≤ 0.2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

KILL_AT = 12
STEPS = 20

SETUP_CELL = "import jax, jax.numpy as jnp\nfrom jax.experimental import multihost_utils\nready = True"


def jaxnb_loop(config):
    """The loop for jaxnb: checkpoint every 5 steps, process 1 killed once at ``KILL_AT``."""
    import json
    import os
    import signal
    import time

    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    w, start = jnp.zeros((4,), jnp.float32), 0
    checkpoint = jaxnb.get_checkpoint()
    restored_at = None
    if checkpoint is not None:
        t0 = time.time()
        state = checkpoint.restore()
        w, start = jnp.asarray(state["w"]), int(state["step"])
        restored_at = (t0, time.time())
    update = jax.jit(lambda w, x: w - 0.05 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w))
    for step in range(start + 1, config["steps"] + 1):
        x = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(0), step), (16, 4))
        w = update(w, x)
        multihost_utils.process_allgather(jnp.ones(1))
        saved = {"w": w, "step": step} if step % 5 == 0 else None
        jaxnb.report({"step": step}, checkpoint=saved)
        if restored_at is not None and rank == 0:
            with open(config["resumed"], "w") as f:
                json.dump({"restore": restored_at, "first_report": time.time()}, f)
            restored_at = None
        if rank == 1 and step == config["kill_at"] and not os.path.exists(config["killed"]):
            with open(config["killed"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


def _config(folder: str) -> dict:
    return {"steps": STEPS, "kill_at": KILL_AT, "killed": os.path.join(folder, "killed"),
            "resumed": os.path.join(folder, "resumed.json")}


def _read(config: dict) -> tuple[float, dict]:
    import json

    with open(config["killed"]) as f:
        killed = float(f.read())
    with open(config["resumed"]) as f:
        return killed, json.load(f)


def _spares_ready(cluster, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    wanted = 0 if cluster.options.spares == 0 else cluster.num_processes
    while len(cluster.group.spare_pids) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)  # new spares start a few seconds after a swap
    want = cluster.num_processes + len(cluster.group.spare_pids)
    while len(cluster.client.ids) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the old engines' registrations are gone too


def bench_jaxnb(repeats: int, spares: int | None) -> tuple[list[float], list[dict[str, float]]]:
    """Restart times, then one recovery split into phases per repeat."""
    import contextlib
    import io

    from jaxnb import JaxCluster

    restarts, recoveries = [], []
    with contextlib.redirect_stdout(io.StringIO()), JaxCluster(n=2, spares=spares) as cluster:
        for _ in range(repeats):
            _spares_ready(cluster)
            t0 = time.perf_counter()
            cluster.restart()
            restarts.append(time.perf_counter() - t0)
        cluster.run(SETUP_CELL)
        for i in range(repeats):
            _spares_ready(cluster)
            with tempfile.TemporaryDirectory() as folder:
                config = _config(folder)
                result = cluster.train(jaxnb_loop, config, name=f"r{i}", storage=folder,
                                       max_failures=1)
                assert result.error is None and len(result.failures) == 1, result
                killed, resumed = _read(config)
                failure = result.failures[0]
                restore = resumed["restore"][1] - resumed["restore"][0]
                phases = {
                    "detect": failure.time - killed,
                    "restart": failure.seconds["restart"],
                    "replay": failure.seconds["replay"],
                    "restore": restore,
                    "first step": max(0.0, failure.seconds["restore_and_first_step"] - restore),
                    "total": resumed["first_report"] - killed,
                }
                recoveries.append(phases)
    return restarts, recoveries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    warm_restarts, warm = bench_jaxnb(args.repeats, spares=None)
    cold_restarts, cold = bench_jaxnb(args.repeats, spares=0)
    for label, times in (("with warm spares (a join)", warm_restarts),
                         ("without spares (stop, start, join)", cold_restarts)):
        print(f"jaxnb restart {label}, 2 processes: median {statistics.median(times):.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times)})")
    print(f"  spares / no spares = {statistics.median(warm_restarts) / statistics.median(cold_restarts):.2f}")
    print(f"jaxnb recovery, kill -> first report after the resume (median of {args.repeats}):")
    print(f"  {'phase':<11} {'spares':>7} {'none':>7}")
    for phase in warm[0]:
        a = statistics.median(r[phase] for r in warm)
        b = statistics.median(r[phase] for r in cold)
        print(f"  {phase:<11} {a:6.2f}s {b:6.2f}s")
    jaxnb_total = statistics.median(r["total"] for r in warm)
    if args.no_ray:
        return
    from bench import _ray_recovery  # Ray's own recovery, this run (a bench-only extra)

    print(_ray_recovery.compare(jaxnb_total, args.repeats, steps=STEPS, kill_at=KILL_AT))


if __name__ == "__main__":
    main()
