"""The failure figures of ``bench/failures.py``, measured through a real Jupyter kernel.

The magics run in an IPython kernel driven by ``jupyter_client`` (see
``tests/kernel_harness.py``), as in a notebook; times are taken here, when the
front end receives the error (or the kernel goes idle), so they include the
kernel's message round trip. Each measurement returns the figure by the same
name as the in-process one.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections.abc import Callable

from tests.support.fault_cells import ASYNC_LOOP, EXPECTED, SETUP, SYNC_LOOP, VERIFY, WEDGED
from tests.support.kernel_harness import Kernel

STARTED = "print('started', flush=True)\n"
CELL = "%%jax_cluster --timeout 120\n"


def now() -> float:
    return time.monotonic()


def pids(k: Kernel) -> list[int]:
    return k.value("[p.pid for p in jaxnb.current_cluster().processes]")


def ensure(k: Kernel) -> None:
    if k.value("bool(_health.dead_processes(jaxnb.current_cluster().group)) "
               "or jaxnb.current_cluster().suspect is not None"):
        k.ok("%jax_cluster restart")
        k.ok("%%jax_cluster\n" + SETUP)


def totals(k: Kernel) -> list[float]:
    out = k.ok("%%jax_cluster --all --timeout 60\n" + VERIFY)
    return [float(ln.split()[-1]) for ln in out.stdout.splitlines() if "total" in ln]


def kill_detection(k: Kernel, victim: int) -> tuple[float, float, bool]:
    """(kill -> the notebook receives the error, restart, the error named the victim first)."""
    ensure(k)
    pid = pids(k)[victim]
    msg_id = k.send(CELL + STARTED + SYNC_LOOP)
    k.collect(msg_id, timeout=60, until="started")
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    killed = now()
    out = k.collect(msg_id, timeout=120)
    detected = (out.error_at or out.idle_at or now()) - killed
    named = out.error is not None and out.error["evalue"].startswith(f"[p{victim}] (pid {pid}")
    t = now()
    k.ok("%jax_cluster restart")
    restart = now() - t
    k.ok("%%jax_cluster\n" + SETUP)
    return detected, restart, named


def divergence(k: Kernel) -> tuple[float, float]:
    ensure(k)
    code = CELL + "if jax.process_index() == 1:\n    raise ValueError('x')\nprint(float(total(1.0)))"
    out = k.run(code)
    assert out.error is not None and out.error["ename"] == "ProcessFailure", out.shown
    t = now()
    k.ok("%%jax_cluster\nmesh = make_mesh()")
    return out.seconds, now() - t


def timeout_overshoot(k: Kernel) -> float:
    ensure(k)
    out = k.run("%%jax_cluster --timeout 2\nimport time\ntime.sleep(60)")
    assert out.error is not None and "timeout of 2 s" in out.error["evalue"], out.shown
    k.ok("%%jax_cluster\npass")
    return out.seconds - 2


def interrupt_trials(k: Kernel, trials: int) -> dict:
    """The Stop button (the kernel manager's interrupt) during psum loops."""
    ensure(k)
    rng = random.Random(0)
    back, nxt, wrong, repairs, loud = [], [], 0, 0, 0
    for trial in range(trials):
        msg_id = k.send(CELL + STARTED + (SYNC_LOOP if trial % 2 == 0 else ASYNC_LOOP))
        k.collect(msg_id, timeout=60, until="started")
        time.sleep(0.5 + rng.random())
        fired = now()
        k.interrupt()
        out = k.collect(msg_id, timeout=120)
        back.append((out.idle_at or now()) - fired)
        check = k.run("%%jax_cluster --all --timeout 60\n" + VERIFY)
        nxt.append(check.seconds)
        if check.error is not None:
            loud += 1
        values = [float(ln.split()[-1]) for ln in check.stdout.splitlines() if "total" in ln]
        wrong += sum(v != EXPECTED for v in values)
        repairs += "repaired" in check.stderr
        k.ok(CELL + "mesh = make_mesh()")
        wrong += sum(v != EXPECTED for v in totals(k))
    return {
        "back_median": statistics.median(back),
        "back_max": max(back),
        "next_cell_median": statistics.median(nxt),
        "next_cell_max": max(nxt),
        "wrong_values": wrong,
        "loud_errors": loud,
        "repairs": repairs,
    }


def reset_time(k: Kernel) -> float:
    ensure(k)
    t = now()
    k.ok("%jax_cluster reset")
    took = now() - t
    k.ok("%%jax_cluster\nmesh = make_mesh()")
    return took


def stop_times(k: Kernel) -> tuple[float, float]:
    """(healthy stop, wedged stop); leaves the cluster stopped."""
    ensure(k)
    t = now()
    k.ok("%jax_cluster stop")
    healthy = now() - t
    k.ok("%jax_cluster start -n 2")
    k.ok("%%jax_cluster\n" + SETUP)
    k.ok("jaxnb.current_cluster().view.execute('if jax.process_index() == 0:\\n    total(1.0)', block=False)")
    time.sleep(1.0)
    t = now()
    k.ok("%jax_cluster stop")
    return healthy, now() - t


def orphan_cleanup() -> tuple[float, int]:
    """(kernel SIGKILL -> every process it launched gone, processes left after 30 s)."""
    k = Kernel()
    try:
        k.ok("%load_ext jaxnb")
        k.ok("%jax_cluster start -n 2")
        k.ok("%%jax_cluster\n" + SETUP)
        k.ok(f"import jaxnb\njaxnb.current_cluster().view.execute({WEDGED!r}, block=False)")
        time.sleep(1.0)
        k.kill()
        t = now()
        left = k.left_running(wait=30)
        return now() - t, len(left)
    finally:
        k.shutdown()


def measure(repeats: int, trials: int, row: Callable[[str, float | int | str], None]) -> None:
    """Every figure through a real kernel; ``row(name, value)`` for each."""
    med = statistics.median
    k = Kernel()
    try:
        k.ok("%load_ext jaxnb\nfrom jaxnb._failures import detect as _health\nimport jaxnb")
        t = now()
        k.ok("%jax_cluster start -n 2")
        row("start (s)", now() - t)
        k.ok("%%jax_cluster\n" + SETUP)
        kills = {v: [kill_detection(k, v) for _ in range(repeats)] for v in (1, 0)}
        row("kill -9 p1 -> cell raises (s, median)", med(d for d, _, _ in kills[1]))
        row("kill -9 p0 -> cell raises (s, median)", med(d for d, _, _ in kills[0]))
        row("kills named first (of all)", sum(n for v in kills for _, _, n in kills[v]))
        row("restart after a dead process (s, median)", med(r for v in kills for _, r, _ in kills[v]))
        div = [divergence(k) for _ in range(repeats)]
        row("divergence: cell start -> raise (s, median)", med(d for d, _ in div))
        row("divergence: next cell incl. repair (s, median)", med(n for _, n in div))
        row("timeout 2 s: overshoot (s, median)", med(timeout_overshoot(k) for _ in range(repeats)))
        res = interrupt_trials(k, trials)
        row(f"interrupt ({trials} trials): SIGINT -> back (s, median)", res["back_median"])
        row("interrupt: SIGINT -> back (s, max)", res["back_max"])
        row("interrupt: next cell incl. check/repair (s, median)", res["next_cell_median"])
        row("interrupt: next cell incl. check/repair (s, max)", res["next_cell_max"])
        row("interrupt: repairs needed", res["repairs"])
        row("interrupt: loud errors on the old mesh", res["loud_errors"])
        row("interrupt: WRONG values", res["wrong_values"])
        row("reset of a healthy group (s, median)", med(reset_time(k) for _ in range(repeats)))
        stops = [stop_times(k) for _ in range(repeats)]
        row("stop, healthy (s, median)", med(h for h, _ in stops))
        row("stop, wedged in a collective (s, median)", med(w for _, w in stops))
    finally:
        left = k.shutdown()
        if left:
            print(f"kernel left processes running (killed them): {left}", flush=True)
    gone, left_n = orphan_cleanup()
    row("kernel SIGKILL -> all launched processes gone (s)", gone)
    row("processes left 30 s after kernel SIGKILL", left_n)
