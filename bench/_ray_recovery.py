"""Ray Train's own recovery, the baseline of ``bench.recovery``: the same Flax MLP loop
(``bench/_mlp.py``) under ``FailureConfig(max_failures=1)``, worker 1 SIGKILLed once, kill →
worker 0's first report after the restore; each phase read from Ray Train's controller log.

Run by the interpreter of a venv that has Ray (never a dependency of jaxnb; it imports no
jaxnb), from the repository's root::

    RAY_PYTHON -m bench._ray_recovery --repeats 3 --json out.json

The trainer is Ray Train V2's ``JaxTrainer`` (Ray 2.60 has it) with stock settings. On CPU it
starts no ``jax.distributed`` group (it does so only for TPUs and GPUs), so each worker trains
on its own devices with no collective between workers: Ray's workers do less per step than
jaxnb's, which favours Ray.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Ray Train's controller log lines that bound its phases (substrings of their messages).
RETRY = "[FailurePolicy] RETRY"
SHUTTING_DOWN, SHUT_DOWN = "Shutting down", "Worker group shutdown successful"
STARTING, ACTORS = "Attempting to start training worker group", "worker actors created"
LAUNCHED = "Train function launched on workers"


def ray_loop(config: dict[str, Any]) -> None:
    """jaxnb's bench loop in Ray Train: a checkpoint directory every 5 steps, worker 1 SIGKILLs
    itself at ``kill_at``, then, while fewer than ``kills`` deaths happened, ``gap`` seconds
    after the previous one; worker 0 writes when it began, built the model, restored, and
    reported after each restore."""
    import glob
    import json
    import os
    import tempfile
    import time

    began = time.time()
    import jax
    import numpy as np
    import ray.train as train
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from bench import _mlp
    from bench._recovery_loop import die_if_due

    rows, params, opt_state, step_fn = _mlp.on_devices(jax.local_devices())
    same = NamedSharding(rows.mesh, P())
    built = time.time()
    context = train.get_context()
    rank, n = context.get_world_rank(), context.get_world_size()
    start, restored = 0, None
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        t0 = time.time()
        with checkpoint.as_directory() as folder:
            saved = np.load(os.path.join(folder, "state.npz"))
            treedef = jax.tree.structure((params, opt_state))
            leaves = [saved[f"leaf{i}"] for i in range(treedef.num_leaves)]
            params, opt_state = jax.device_put(jax.tree.unflatten(treedef, leaves), same)
            start = int(saved["step"])
        restored = (t0, time.time())
    local = _mlp.BATCH // n
    deaths, first_step = sorted(glob.glob(os.path.join(config["folder"], "killed-*"))), 0.0
    for step in range(start + 1, config["steps"] + 1):
        if config.get("kills", 1) > 1 and len(deaths) >= config["kills"] and step > start + 10:
            break  # back to back: a few steps after the last recovery are enough
        x, y = _mlp.batch(step, local, rank * local)
        params, opt_state, loss = step_fn(params, opt_state, jax.device_put(x, rows),
                                          jax.device_put(y, rows))
        metrics = {"step": step, "loss": float(loss)}
        if step % 5 == 0:
            with tempfile.TemporaryDirectory() as folder:
                if rank == 0:
                    leaves = jax.tree.leaves((params, opt_state))
                    np.savez(os.path.join(folder, "state.npz"), step=step,
                             **{f"leaf{i}": np.asarray(v) for i, v in enumerate(leaves)})
                train.report(metrics, checkpoint=train.Checkpoint.from_directory(folder))
        else:
            train.report(metrics)
        if restored is not None and rank == 0:
            with open(os.path.join(config["folder"], f"resumed-{len(deaths)}.json"), "w") as f:
                json.dump({"began": began, "built": built, "restore": restored,
                           "first_report": time.time()}, f)
            restored = None
        time.sleep(config.get("pause", 0.0))
        first_step = first_step or time.time()
        if rank == 1:
            die_if_due(config, deaths, step, first_step)


def trainer_class() -> tuple[Any, str]:
    """Ray Train's ``JaxTrainer`` if this Ray has it, else ``DataParallelTrainer``; and its name."""
    try:
        from ray.train.v2.jax import JaxTrainer

        return JaxTrainer, "JaxTrainer"
    except ImportError:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        return DataParallelTrainer, "DataParallelTrainer"


def controller_lines(session: str) -> list[tuple[float, str]]:
    """(time, message) of every line of Ray Train's controller logs in ``session``, in order."""
    lines = []
    for path in glob.glob(os.path.join(session, "logs", "train", "ray-train-*-controller-*.log")):
        with open(path) as f:
            for text in f:
                try:
                    record = json.loads(text)
                except ValueError:
                    continue
                when = record.get("timestamp_ns")
                seconds = when / 1e9 if when else datetime.datetime.strptime(
                    record["asctime"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                lines.append((seconds, record.get("message", "")))
    return sorted(set(lines))


def phases_from_log(lines: list[tuple[float, str]], killed: float, resumed: dict) -> dict[str, float]:
    """The recovery's phases: the controller's log lines after the kill, the loop's own times."""

    def first(text: str, after: float) -> float:
        return next((t for t, message in lines if t >= after and text in message), float("nan"))

    retry = first(RETRY, killed)
    down_from = first(SHUTTING_DOWN, retry)
    down = first(SHUT_DOWN, down_from)
    starting = first(STARTING, down)
    actors = first(ACTORS, starting)
    launched = first(LAUNCHED, actors)
    (r0, r1), total = resumed["restore"], resumed["first_report"] - killed
    phases = {"detect": retry - killed, "stop the old group": down - down_from,
              "start or swap": actors - starting, "join jax.distributed": launched - actors,
              "replay": resumed["built"] - resumed["began"], "restore": r1 - r0,
              "first step": resumed["first_report"] - r1}
    phases["other"] = total - sum(phases.values())
    phases["total"] = total
    return {k: round(v, 3) for k, v in phases.items()}


def measure(repeats: int, steps: int, kill_at: int, devices: int, kills: int = 1,
            gap: float = 10.0) -> dict[str, Any]:
    """Per repeat: kill → first report after the restore, and its phases; then, with ``kills``
    above 1, one run that loses worker 1 that many times, ``gap`` seconds apart."""
    try:
        import ray

        trainer, name = trainer_class()
    except ImportError as exc:
        return {"not_measured": f"Ray Train is not installed here ({exc})"}
    os.environ["JAX_PLATFORMS"] = "cpu"  # the workers inherit these
    os.environ["JAX_NUM_CPU_DEVICES"] = str(devices)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    # On a loaded machine Ray's agents may take longer than its default waits to come up.
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    try:
        context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                           object_store_memory=200 * 2**20)
    except Exception as exc:  # e.g. its raylet does not come up on a loaded machine
        return {"not_measured": f"Ray did not start here ({str(exc).splitlines()[0]})"}
    session = context.address_info.get("session_dir") or "/tmp/ray/session_latest"
    runs, b2b = [], []
    try:
        for i in range(repeats):
            runs.extend(_run(trainer, session, f"r{i}", 1, steps, kill_at, gap))
        if kills > 1:
            b2b = _run(trainer, session, "b2b", kills, steps, kill_at, gap)
    finally:
        ray.shutdown()
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    figures = {"version": ray.__version__, "trainer": name, "runs": runs, "medians": medians,
               "totals": [r["total"] for r in runs]}
    if b2b:
        figures["back to back"] = {"kills": kills, "gap_s": gap, "runs": b2b,
                                   "totals": [r["total"] for r in b2b]}
    return figures


def _run(trainer: Any, session: str, name: str, kills: int, steps: int, kill_at: int,
         gap: float) -> list[dict[str, float]]:
    """One run of the loop that loses worker 1 ``kills`` times; each recovery's phases."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig

    with tempfile.TemporaryDirectory() as folder:
        config = {"steps": steps, "kill_at": kill_at, "folder": folder, "kills": kills,
                  "gap": gap, "pause": 0.0 if kills == 1 else 0.05}
        if kills > 1:  # steps take >= the pause: the deaths' span, then a few more
            config["steps"] = kill_at + int((kills - 1) * gap / 0.05) + 100
        trainer(ray_loop, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(name=name, storage_path=folder,
                                     failure_config=FailureConfig(max_failures=kills))).fit()
        found = []
        time.sleep(1.0)  # the controller's last lines reach its log
        lines = controller_lines(session)
        for death in range(1, kills + 1):
            with open(os.path.join(folder, f"killed-{death}")) as f:
                killed = float(f.read())
            with open(os.path.join(folder, f"resumed-{death}.json")) as f:
                resumed = json.load(f)
            found.append(phases_from_log(lines, killed, resumed))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--kill-at", type=int, default=12)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--kills", type=int, default=1, help="back to back: deaths in one run")
    parser.add_argument("--gap", type=float, default=10.0, help="back to back: seconds between")
    parser.add_argument("--json", default=None, help="write the figures here (else print them)")
    args = parser.parse_args()
    figures = measure(args.repeats, args.steps, args.kill_at, args.devices, args.kills, args.gap)
    text = json.dumps(figures, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)
    sys.exit(0)


if __name__ == "__main__":
    main()
