"""Ray Train's own recovery, the baseline of ``bench.recovery``: the same small loop under
``FailureConfig(max_failures=1)``, worker 1 SIGKILLed once, kill → worker 0's first report
after the restore.

Ray is a bench-only extra (``pip install -e ".[bench]"``), never a dependency of jaxnb.
The trainer is Ray Train V2's ``JaxTrainer`` where this Ray has it (2.60 does), else its
``DataParallelTrainer``. On CPU, ``JaxTrainer`` starts no ``jax.distributed`` group (it
does so only for TPUs and GPUs), so the loop has no collective here: Ray's workers do less
per step than jaxnb's, which favours Ray.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from typing import Any

INSTALL = 'pip install -e ".[bench]"'


class NotMeasured(Exception):
    """Ray is missing or did not start: the one-line reason."""


def ray_loop(config: dict[str, Any]) -> None:
    """jaxnb's bench loop in Ray Train: a gradient step per step, a directory checkpoint
    every 5 steps, worker 1 SIGKILLs itself once at ``kill_at``."""
    import signal
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    import ray.train as train

    rank = train.get_context().get_world_rank()
    w, start = jnp.zeros((4,), jnp.float32), 0
    checkpoint = train.get_checkpoint()
    restored_at = None
    if checkpoint is not None:
        t0 = time.time()
        with checkpoint.as_directory() as folder:
            state = np.load(os.path.join(folder, "state.npz"))
            w, start = jnp.asarray(state["w"]), int(state["step"])
        restored_at = (t0, time.time())
    update = jax.jit(lambda w, x: w - 0.05 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w))
    for step in range(start + 1, config["steps"] + 1):
        x = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(0), step), (16, 4))
        w = update(w, x)
        if step % 5 == 0:
            with tempfile.TemporaryDirectory() as folder:
                if rank == 0:
                    np.savez(os.path.join(folder, "state.npz"), w=np.asarray(w), step=step)
                train.report({"step": step}, checkpoint=train.Checkpoint.from_directory(folder))
        else:
            train.report({"step": step})
        if restored_at is not None and rank == 0:
            with open(config["resumed"], "w") as f:
                json.dump({"restore": restored_at, "first_report": time.time()}, f)
            restored_at = None
        if rank == 1 and step == config["kill_at"] and not os.path.exists(config["killed"]):
            with open(config["killed"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


def trainer_class() -> tuple[Any, str]:
    """Ray Train's ``JaxTrainer`` if this Ray has it, else ``DataParallelTrainer``; and its name."""
    try:
        from ray.train.v2.jax import JaxTrainer

        return JaxTrainer, "JaxTrainer"
    except ImportError:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        return DataParallelTrainer, "DataParallelTrainer"


def recovery_seconds(repeats: int, steps: int, kill_at: int) -> tuple[list[float], str]:
    """Kill → worker 0's first report after the restore, per repeat; and the trainer's name.

    Raises :class:`NotMeasured` when Ray is not installed or does not start here.
    """
    try:
        import ray
        from ray.train import FailureConfig, RunConfig, ScalingConfig

        trainer, name = trainer_class()
    except ImportError as exc:
        raise NotMeasured(f"Ray Train is not installed ({exc}); {INSTALL} to compare") from None
    os.environ["JAX_PLATFORMS"] = "cpu"  # the workers inherit it
    # On a loaded machine Ray's agents may take longer than its default waits to come up.
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 2**20)
    except Exception as exc:  # e.g. its raylet does not come up on a loaded machine
        raise NotMeasured(f"Ray did not start here ({str(exc).splitlines()[0]})") from None
    totals = []
    try:
        for i in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                config = {"steps": steps, "kill_at": kill_at, "killed": os.path.join(folder, "killed"),
                          "resumed": os.path.join(folder, "resumed.json")}
                trainer(ray_loop, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=f"r{i}", storage_path=folder,
                                             failure_config=FailureConfig(max_failures=1))).fit()
                with open(config["killed"]) as f:
                    killed = float(f.read())
                with open(config["resumed"]) as f:
                    totals.append(json.load(f)["first_report"] - killed)
    finally:
        ray.shutdown()
    return totals, name


def compare(jaxnb_seconds: float | None, repeats: int, steps: int, kill_at: int) -> str:
    """Ray's recovery, measured now, and jaxnb's (``jaxnb_seconds``, this run's; ``None``
    when not measured) ÷ Ray's."""
    try:
        totals, name = recovery_seconds(repeats, steps, kill_at)
    except NotMeasured as why:
        return f"Ray Train: not measured: {why}"
    ray_total = statistics.median(totals)
    return (f"Ray Train recovery ({name}, FailureConfig(max_failures=1)), kill -> first report "
            f"after the restore: median {ray_total:.2f} s ({', '.join(f'{t:.2f}' for t in totals)})"
            + ("" if jaxnb_seconds is None else
               f"\njaxnb (local, with spares) / Ray = {jaxnb_seconds / ray_total:.2f} (target <= 0.2)"))
