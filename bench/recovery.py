"""Recovery from a dead process: jaxnb's ``--max-failures`` against Ray Train's, in one run.

    python -m bench.recovery [--repeats 3] [--only local,lab,ray] [--no-ray]

Sections (``SECTIONS``; each prints its own lines, ``--only`` picks some):

- ``local``: a 2-process CPU cluster on this machine;
- ``lab``: one engine on each of two lab ssh hosts (network namespaces with real sshd, as
  in tests/lab; needs root: skipped, saying why, where the lab cannot be built);

each measuring, with warm spares and without (``spares=0``), in one loop per repeat:

- restart: ``JaxCluster.restart()`` (spares registered beforehand: only a join; without:
  stop, start, join ``jax.distributed``); targets ≤ 0.5 s here, ≤ 1.5 s on the hosts;
- recovery: a small checkpointed loop (a collective and a gradient step per step,
  a checkpoint every 5 steps) whose process 1 SIGKILLs itself at step 12, run with
  ``max_failures=1``: kill → first report after the resume, split into detect (kill →
  death seen), restart, replay (one setup cell), restore (in the loop) and first step;

- memory: the resident memory (RSS) of each warm spare and of each group engine after it
  joined, before the first restart;

- ``ray``: Ray Train (``pip install -e ".[bench]"``), in the same run: see
  :mod:`bench._ray_recovery`; the ratio jaxnb (local, with spares) ÷ Ray (target ≤ 0.2).

Prints medians; also writes them to ``bench/results/recovery.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from bench._results import Results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Engines on the lab hosts import this module's loop (the same interpreter, the same path).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

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


def resident_mb(pids) -> list[float]:
    """The resident memory (RSS, MB) of each process still running."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid).memory_info().rss / 1e6)
    return found


def measure(repeats: int, **cluster_options
            ) -> tuple[list[float], list[dict[str, float]], dict[str, list[float]]]:
    """One loop: per repeat, a restart's seconds, then one recovery split into phases; and the
    memory of the spares and of the group's engines, once, before the first restart."""
    from jaxnb import JaxCluster

    restarts, recoveries, memory = [], [], {}
    with contextlib.redirect_stdout(io.StringIO()), JaxCluster(**cluster_options) as cluster:
        for i in range(repeats):
            _spares_ready(cluster)
            if i == 0:
                memory = {"spare_mb": resident_mb(cluster.group.spare_pids),
                          "engine_mb": resident_mb(p.pid for p in cluster.processes)}
            t0 = time.perf_counter()
            cluster.restart()
            restarts.append(time.perf_counter() - t0)
            cluster.run(SETUP_CELL)  # the setup a recovery replays
            _spares_ready(cluster)
            recoveries.append(_recovery(cluster, f"r{i}"))
    return restarts, recoveries, memory


def _recovery(cluster, name: str) -> dict[str, float]:
    """Kill → first report after the resume, by phase, for one run of ``jaxnb_loop``."""
    with tempfile.TemporaryDirectory() as folder:
        config = _config(folder)
        result = cluster.train(jaxnb_loop, config, name=name, storage=folder, max_failures=1)
        assert result.error is None and len(result.failures) == 1, result
        killed, resumed = _read(config)
    failure = result.failures[0]
    restore = resumed["restore"][1] - resumed["restore"][0]
    return {
        "detect": failure.time - killed,
        "restart": failure.seconds["restart"],
        "replay": failure.seconds["replay"],
        "restore": restore,
        "first step": max(0.0, failure.seconds["restore_and_first_step"] - restore),
        "total": resumed["first_report"] - killed,
    }


def compare(where: str, repeats: int, found: dict, **cluster_options) -> None:
    """Restart and recovery with warm spares and without, on one kind of cluster; prints them
    and records the median recovery with spares in ``found[where]``."""
    warm_restarts, warm, memory = measure(repeats, spares=None, **cluster_options)
    cold_restarts, cold, _ = measure(repeats, spares=0, **cluster_options)
    for label, times in (("with warm spares (a join)", warm_restarts),
                         ("without spares (stop, start, join)", cold_restarts)):
        print(f"jaxnb restart {label}, {where}: median {statistics.median(times):.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times)})")
    print(f"  spares / no spares = {statistics.median(warm_restarts) / statistics.median(cold_restarts):.2f}")
    print(f"jaxnb recovery, {where}, kill -> first report after the resume (median of {repeats}):")
    print(f"  {'phase':<11} {'spares':>7} {'none':>7}")
    for phase in warm[0]:
        a = statistics.median(r[phase] for r in warm)
        b = statistics.median(r[phase] for r in cold)
        print(f"  {phase:<11} {a:6.2f}s {b:6.2f}s")
    spare, engine = memory.get("spare_mb") or [0.0], memory.get("engine_mb") or [0.0]
    print(f"jaxnb memory, {where}: a warm spare {statistics.median(spare):.0f} MB resident, a group "
          f"engine after joining {statistics.median(engine):.0f} MB (medians of "
          f"{len(memory.get('spare_mb', []))} spares, {len(memory.get('engine_mb', []))} engines)")
    found[where] = statistics.median(r["total"] for r in warm)
    found["results"].add(**{where: {
        "repeats": repeats,
        "restart_s": {"spares": statistics.median(warm_restarts),
                      "no_spares": statistics.median(cold_restarts)},
        "recovery_s": {phase: {"spares": statistics.median(r[phase] for r in warm),
                               "no_spares": statistics.median(r[phase] for r in cold)}
                       for phase in warm[0]},
        "memory_mb": {"spare": statistics.median(spare), "engine": statistics.median(engine),
                      "spares_measured": memory.get("spare_mb", []),
                      "engines_measured": memory.get("engine_mb", [])},
    }})


def local_section(args: argparse.Namespace, found: dict) -> None:
    """A 2-process cluster on this machine."""
    compare("2 local processes", args.repeats, found, n=2)


def lab_section(args: argparse.Namespace, found: dict) -> None:
    """One engine on each of two lab ssh hosts (root only: it builds the lab of tests/lab)."""
    from tests.lab.lab import Lab, missing

    why = missing()
    if why:
        print(f"jaxnb on two lab ssh hosts: not measured ({why})")
        return
    with Lab(2).running() as lab:
        compare("2 lab ssh hosts", args.repeats, found, hosts=lab.addresses)


def ray_section(args: argparse.Namespace, found: dict) -> None:
    """Ray Train's recovery of the same loop, and jaxnb's local recovery against it."""
    if args.no_ray:
        return
    from bench import _ray_recovery  # Ray's own recovery, this run (a bench-only extra)

    print(_ray_recovery.compare(found.get("2 local processes"), args.repeats, steps=STEPS,
                                kill_at=KILL_AT))


Section = Callable[[argparse.Namespace, dict], None]
#: What ``main`` runs, in order; each section prints its own lines and may leave figures in
#: the shared dict for later sections (``found["2 local processes"]``: jaxnb's local recovery).
SECTIONS: dict[str, Section] = {"local": local_section, "lab": lab_section, "ray": ray_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"sections to run, comma-separated (default: {','.join(SECTIONS)})")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    found: dict = {"results": Results("recovery")}
    for name in chosen:
        SECTIONS[name](args, found)
    found["results"].write()


if __name__ == "__main__":
    main()
