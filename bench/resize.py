"""``--min-processes``: from the loss of a host to the first step on fewer processes, against
waiting for ``--init-timeout`` and then failing; steps/s before and after the change.

    python -m bench.resize [--repeats 1] [--only lab,local] [--init-timeout 60] [--steps 300]
                           [--spares N]

Sections (``--only`` picks some):

- ``lab``: one engine on each of 3 lab ssh hosts (network namespaces with real sshd, as in
  tests/lab; root only, else "not measured" and why), with the cluster's warm spares (one per
  process, ``--spares N`` to change; the run starts once they registered). At step 20 the
  third host's link goes down for good. With ``max_failures=2, min_processes=2``: loss → the
  first report made on 2 processes. With ``max_failures=2`` alone (today): loss → the run's
  end (the host does not answer within ``--init-timeout``).
- ``local``: 3 processes on this machine, ``spares=0``: process 2 is SIGKILLed at step 20 and
  the restart's first engine too (a lost slot). With ``min_processes=2``: loss → the first
  report on 2 processes; without: loss → the run's end (the restart cannot start process 2).

Both loops read a dataset (``iter_jax_batches``, global batch 12) and take an SGD step on a
replicated weight, a checkpoint every 10 steps. steps/s: the reports' own times, at 3
processes before the loss and at 2 after it (the global batch is the same: each of the 2
takes 6 rows where each of 3 took 4). Medians of the repeats. Writes the figures, with the
date, machine, load and command, to ``bench/results/resize.json`` (:mod:`bench._results`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import tempfile
import time

from bench._results import Results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Engines on the lab hosts import this module's loop (the same interpreter, the same path).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

LOSE_AT = 20
DATA_CELL = """
import numpy as np
_rng = np.random.default_rng(0)
bench_x = _rng.standard_normal((6000, 4)).astype(np.float32)
bench_data = {"x": bench_x, "y": bench_x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)}
"""


def resize_loop(config):
    """SGD on the dataset's global batches; process 0 writes ``flag`` at step ``lose_at``."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxnb

    ctx = jaxnb.get_context()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    w, start = jax.device_put(jnp.zeros(4, jnp.float32), NamedSharding(mesh, P())), 0
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        state = checkpoint.restore({"w": w, "step": 0})
        w, start = state["w"], state["step"]
    step = jax.jit(lambda w, x, y: w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w))
    batches = iter(jaxnb.get_dataset_shard("train").iter_jax_batches(
        12, sharding=NamedSharding(mesh, P("data"))))
    for i in range(start, config["steps"]):
        batch = next(batches)
        w = step(w, batch["x"], batch["y"])
        w.block_until_ready()
        saved = {"w": w, "step": i + 1} if (i + 1) % 10 == 0 else None
        jaxnb.report({"step": i + 1, "world": ctx.get_world_size(), "t": time.time()}, checkpoint=saved)
        if i + 1 == config["lose_at"] and ctx.get_world_rank() == 0:
            open(config["flag"], "a").close()


def _rate(history: list[dict], world: int, after: float | None = None) -> float | None:
    """Steps per second over the reports made at ``world`` processes (after time ``after``),
    the first one left out (it waits for the compilation)."""
    times = [h["t"] for h in history if h["world"] == world and (after is None or h["t"] > after)]
    times = times[1:]
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else None


def one_run(cluster, lose, elastic: bool, steps: int, folder: str) -> dict:
    """One run that loses a process at ``LOSE_AT``: seconds to the first step on 2 (elastic)
    or to the run's end (not), and steps/s before and after."""
    flag, lost = os.path.join(folder, "lose"), {}
    config = {"steps": steps, "lose_at": LOSE_AT, "flag": flag}

    def act() -> None:
        lost["t"] = time.time()
        lose()

    from tests.support.clusters import on_flag

    thread = on_flag(flag, act, seconds=300)
    extra = {"min_processes": 2} if elastic else {}
    error = None
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            result = cluster.train(resize_loop, config, name="elastic" if elastic else "today",
                                   storage=folder, datasets={"train": "bench_data"},
                                   max_failures=2, **extra)
        except Exception as exc:  # today: the run ends with the loss
            error = exc
    ended = time.time()
    thread.join(5)
    if elastic:
        assert error is None and result.error is None, error or result.error
        first = min(h["t"] for h in result.history if h["world"] == 2)
        failure = result.failures[0]
        return {**failure.phases, "recovery": failure.seconds,
                "to_first_step_on_2": first - lost["t"], "detect": failure.time - lost["t"],
                "steps_per_s_on_3": _rate(result.history, 3),
                "steps_per_s_on_2": _rate(result.history, 2, after=lost["t"])}
    assert error is not None, "the run went on without min_processes"
    return {"to_failure": ended - lost["t"]}


def measure(where: str, repeats: int, make_cluster, lose_factory, steps: int,
            heal=lambda: None) -> dict:
    """``repeats`` pairs of runs (with and without min_processes) on fresh clusters; ``heal``
    after each (the cut link up again)."""
    from jaxnb import JaxCluster
    from tests.support.clusters import spares_registered

    runs: dict[str, list[float]] = {}
    for _ in range(repeats):
        for elastic in (True, False):
            try:
                with tempfile.TemporaryDirectory() as folder, \
                        contextlib.redirect_stdout(io.StringIO()), JaxCluster(**make_cluster()) as cluster:
                    cluster.run(DATA_CELL)
                    if make_cluster().get("spares") is None:  # one per process: ready first
                        spares_registered(cluster, 180)
                    figures = one_run(cluster, lose_factory(cluster), elastic, steps, folder)
            finally:
                heal()
            for key, value in figures.items():
                if value is not None:
                    runs.setdefault(key, []).append(value)
    found = {key: statistics.median(values) for key, values in runs.items()}
    print(f"{where} (median of {repeats}):")
    print(f"  loss -> first step on 2 processes (min_processes=2): {found['to_first_step_on_2']:.2f} s")
    print(f"  loss -> the run's end without it (today):            {found['to_failure']:.2f} s")
    print(f"  ratio: {found['to_first_step_on_2'] / found['to_failure']:.2f}")
    from jaxnb._core import phases

    parts = ", ".join(f"{k} {found[k]:.2f} s" for k in phases.ORDER if k in found)
    print(f"  … of which: {parts} (the rest: preparing the run)")
    for key in ("steps_per_s_on_3", "steps_per_s_on_2"):
        if key in found:
            print(f"  {key.replace('_', ' ').replace('steps per s', 'steps/s')}: {found[key]:.1f}")
    return found


def lab_section(args: argparse.Namespace) -> dict | None:
    from tests.lab.lab import Lab, missing

    why = missing()
    if why:
        print(f"3 lab ssh hosts: not measured ({why})")
        return None
    with Lab(3).running() as lab:
        third = lab.hosts[2]

        def lose_factory(cluster):
            def cut() -> None:
                third.link(False)
            return cut

        try:
            return measure("3 lab ssh hosts, the third host's link cut for good", args.repeats,
                           lambda: {"hosts": lab.addresses, "spares": args.spares,
                                    "init_timeout": args.init_timeout}, lose_factory, args.steps,
                           heal=lambda: third.link(True))
        finally:
            third.link(True)


def local_section(args: argparse.Namespace) -> dict:
    from tests.support.clusters import engine_pids, lose_a_slot

    def lose_factory(cluster):
        victim, known = cluster.processes[2].pid, engine_pids(os.getpid())

        def kill() -> None:
            lose_a_slot(os.getpid(), known)
            os.kill(victim, signal.SIGKILL)
        return kill

    return measure("3 local processes, process 2 and its slot lost", args.repeats,
                   lambda: {"n": 3, "spares": 0, "init_timeout": args.init_timeout}, lose_factory,
                   args.steps)


SECTIONS = {"lab": lab_section, "local": local_section}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections: lab, local")
    parser.add_argument("--init-timeout", type=float, default=60.0, help="seconds (jaxnb's default)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--spares", type=int, default=None,
                        help="warm spares of the lab cluster (default: one per process, "
                             "registered before the run starts)")
    args = parser.parse_args(argv)
    results = Results("resize")
    results.add(**{name: SECTIONS[name](args) for name in args.only.split(",") if name})
    results.write()


if __name__ == "__main__":
    main()
