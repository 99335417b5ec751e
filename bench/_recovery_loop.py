"""The loop ``bench.recovery`` trains under jaxnb (Ray's twin is in ``bench/_ray_recovery.py``),
and the times it leaves in its folder: when process 1 was killed (``killed-N``), when the
attempt after that death began, restored and first reported (``resumed-N.json``)."""

from __future__ import annotations

import json
import os

KILL_AT = 12
STEPS = 20
#: Back to back: this many deaths in one run, each this long after the previous one.
KILLS, GAP_SECONDS = 4, 10.0
#: Back to back, a resumed attempt trains at least this long before the next death (a
#: recovery slower than the gap, on a loaded machine, is not followed by an instant death).
TRAINS_SECONDS = 2.0


def jaxnb_loop(config):
    """The loop under jaxnb: data-parallel over every process's devices (a collective per
    step), a checkpoint every 5 steps; process 1 SIGKILLs itself at ``kill_at``, then, while
    fewer than ``kills`` deaths happened, ``gap`` seconds after the previous one (back to back).
    Process 0 writes when each resumed attempt began, restored and first reported."""
    import glob
    import json
    import os
    import time

    import jax

    import jaxnb
    from bench import _mlp
    from bench._recovery_loop import die_if_due

    began = time.time()
    rank, n = jaxnb.get_context().get_world_rank(), jaxnb.get_context().get_world_size()
    rows, params, opt_state, step_fn = _mlp.on_devices(jax.devices())
    start, restored = 0, None
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        t0 = time.time()
        state = checkpoint.restore()
        params, opt_state, start = state["params"], state["opt"], int(state["step"])
        restored = (t0, time.time())
    deaths, first_step = sorted(glob.glob(os.path.join(config["folder"], "killed-*"))), 0.0
    for step in range(start + 1, config["steps"] + 1):
        params, opt_state, loss = step_fn(params, opt_state, *_mlp.global_batch(step, rank, n, rows))
        saved = {"params": params, "opt": opt_state, "step": step} if step % 5 == 0 else None
        jaxnb.report({"step": step, "loss": loss}, checkpoint=saved)
        if restored is not None and rank == 0:
            with open(os.path.join(config["folder"], f"resumed-{len(deaths)}.json"), "w") as f:
                json.dump({"began": began, "restore": restored, "first_report": time.time()}, f)
            restored = None
        first_step = first_step or time.time()
        time.sleep(config.get("pause", 0.0))
        if rank == 1:
            die_if_due(config, deaths, step, first_step)


def die_if_due(config: dict, deaths: list[str], step: int, first_step: float) -> None:
    """SIGKILL this process if its next death is due: at ``kill_at`` for the first, ``gap``
    seconds after the previous one for the others (and at least :data:`TRAINS_SECONDS` after
    this attempt's first step), never at a checkpoint's step (``deaths``: the ``killed-N``
    files of the deaths so far). Both loops' process 1 call it."""
    import signal
    import time

    if len(deaths) >= config.get("kills", 1):
        return
    if deaths:
        with open(deaths[-1]) as f:
            at = max(float(f.read()) + config["gap"], first_step + TRAINS_SECONDS)
        due = at <= time.time() and step % 5 != 0
    else:
        due = step == config["kill_at"]
    if due:
        with open(os.path.join(config["folder"], f"killed-{len(deaths) + 1}"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)


def run_config(folder: str, kills: int = 1, gap: float = GAP_SECONDS) -> dict:
    return {"steps": STEPS if kills == 1 else 100_000, "kill_at": KILL_AT, "folder": folder,
            "kills": kills, "gap": gap, "pause": 0.0 if kills == 1 else 0.05}


def read_times(config: dict, death: int = 1) -> tuple[float, dict]:
    with open(os.path.join(config["folder"], f"killed-{death}")) as f:
        killed = float(f.read())
    with open(os.path.join(config["folder"], f"resumed-{death}.json")) as f:
        return killed, json.load(f)
