#!/usr/bin/env python
"""How fast jaxnb notices, reports and recovers from failures, measured on real engines.

One command prints every number (seconds unless noted), each the median of
``--repeats`` runs where it is cheap to repeat:

- start / stop (healthy) / stop (wedged: a process blocked in a collective)
- kill -9 of process 1 and of process 0: kill -> the cell raises
- divergence (process 1 raises, process 0 enters a psum): cell start -> raise
- timeout overshoot: ``--timeout 2`` on a sleeping cell -> raise, minus 2 s
- interrupt trials of psum loops: SIGINT to this process -> the notebook is back;
  the next cell's check / repair time; wrong values (must be 0)
- reset in place of a healthy group
- restart of a cluster with a dead process
- kernel SIGKILL -> every launched process gone (engines busy)
- start with a busy coordinator port -> StartError

Every figure but the last is measured twice in the same run: with jaxnb driven
from this process, and through a real Jupyter kernel (``jupyter_client``, the
Stop button's interrupt, the error as the front end receives it); see
``bench/_kernel_failures.py``. Also written to ``bench/results/failures.json``.

    python -m bench.failures [--repeats 3] [--trials 10] [--mode both|shell|kernel]

This is a benchmark harness only; it is not part of the jaxnb package.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import psutil

from bench._results import Results
from jaxnb import JaxCluster, ProcessFailure, RemoteError, StartError
from jaxnb._core.errors import ClusterStateError
from jaxnb._failures import detect
from tests.support.fault_cells import ASYNC_LOOP, EXPECTED, SETUP, SYNC_LOOP, VERIFY


def now() -> float:
    return time.monotonic()


@contextlib.contextmanager
def quiet():
    """Swallow what cells and jaxnb print (the numbers are the output)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def started() -> tuple[JaxCluster, float]:
    t = now()
    with quiet():
        c = JaxCluster(n=2).start()
        took = now() - t
        c.run(SETUP)
    return c, took


def ensure(c: JaxCluster) -> JaxCluster:
    with quiet():
        if not c.running or detect.dead_processes(c.group):
            c.restart()
            c.run(SETUP)
    return c


def totals(c: JaxCluster) -> list[float]:
    with quiet() as (out, _):
        c.run(VERIFY, all=True, timeout=60)
    return [float(ln.split()[1]) for ln in out.getvalue().splitlines() if ln.startswith("total")]


def kill_detection(c: JaxCluster, victim: int) -> tuple[float, float]:
    """(kill -> raise, restart) seconds."""
    ensure(c)
    pid = c.processes[victim].pid
    killed: list[float] = []
    threading.Timer(1.5, lambda: (killed.append(now()), os.kill(pid, signal.SIGKILL))).start()
    with quiet(), contextlib.suppress(ProcessFailure):
        c.run(SYNC_LOOP, timeout=60)
    detected = now() - killed[0]
    t = now()
    with quiet():
        c.restart()
    restart = now() - t
    with quiet():
        c.run(SETUP)
    return detected, restart


def divergence(c: JaxCluster) -> tuple[float, float]:
    """(cell start -> raise, next cell incl. repair) seconds."""
    ensure(c)
    code = "if jax.process_index() == 1:\n    raise ValueError('x')\nprint(float(total(1.0)))"
    t = now()
    with quiet(), contextlib.suppress(ProcessFailure):
        c.run(code, timeout=120)
    raised = now() - t
    t = now()
    with quiet():
        c.run("mesh = make_mesh()")
    return raised, now() - t


def timeout_overshoot(c: JaxCluster) -> float:
    ensure(c)
    t = now()
    with quiet(), contextlib.suppress(ProcessFailure):
        c.run("import time\ntime.sleep(60)", timeout=2)
    overshoot = now() - t - 2
    with quiet():
        c.run("pass")
    return overshoot


def interrupt_trials(c: JaxCluster, trials: int) -> dict:
    ensure(c)
    rng = random.Random(0)
    back, nxt, wrong, repairs, loud = [], [], 0, 0, 0
    for trial in range(trials):
        fired: list[float] = []

        def fire(fired: list[float] = fired) -> None:
            fired.append(now())
            signal.raise_signal(signal.SIGINT)

        threading.Timer(1.0 + rng.random(), fire).start()
        with quiet(), contextlib.suppress(KeyboardInterrupt):
            c.run(SYNC_LOOP if trial % 2 == 0 else ASYNC_LOOP, timeout=120)
        back.append(now() - fired[0])
        t = now()
        with quiet() as (out, err):
            try:  # the old mesh: the right total, or a loud error
                c.run(VERIFY, all=True, timeout=60)
            except (RemoteError, ClusterStateError):
                loud += 1
        nxt.append(now() - t)
        values = [float(ln.split()[1]) for ln in out.getvalue().splitlines() if ln.startswith("total")]
        wrong += sum(v != EXPECTED for v in values)
        repairs += "repaired" in err.getvalue()
        with quiet():
            c.run("mesh = make_mesh()", timeout=60)
        wrong += sum(v != EXPECTED for v in totals(c))
    return {
        "back_median": statistics.median(back),
        "back_max": max(back),
        "next_cell_median": statistics.median(nxt),
        "next_cell_max": max(nxt),
        "wrong_values": wrong,
        "loud_errors": loud,
        "repairs": repairs,
    }


def reset_time(c: JaxCluster) -> float:
    ensure(c)
    t = now()
    with quiet():
        c.reset()
    took = now() - t
    with quiet():
        c.run("mesh = make_mesh()")
    return took


def stop_times(c: JaxCluster) -> tuple[float, float]:
    """(healthy stop, wedged stop); leaves ``c`` stopped."""
    ensure(c)
    t = now()
    c.stop()
    healthy = now() - t
    with quiet():
        c.start()
        c.run(SETUP)
    c.view.execute("if jax.process_index() == 0:\n    total(1.0)", block=False)
    time.sleep(1.0)
    t = now()
    c.stop()
    return healthy, now() - t


#: A stand-in kernel that starts a busy cluster (shared with the tests).
BUSY_KERNEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support",
                           "busy_kernel.py")


def orphan_cleanup() -> tuple[float, int]:
    """(kernel SIGKILL -> all launched processes gone, processes left after 30 s)."""
    kernel = subprocess.Popen([sys.executable, BUSY_KERNEL], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(kernel.stdout.readline())["pids"]
    finally:
        kernel.kill()
        kernel.wait()
    t = now()
    left = pids
    while left and now() - t < 30:
        time.sleep(0.05)
        left = [pid for pid in left if _running(pid)]
    return now() - t, len(left)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def busy_port_start() -> float:
    """Start with the coordinator's port taken by another program (fault injected)."""
    from jaxnb._hosts import site

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = f"127.0.0.1:{blocker.getsockname()[1]}"
    site.LOCAL.coordinator_address = lambda group, first_engine: busy
    c = JaxCluster(n=2, init_timeout=30)
    t = now()
    try:
        with quiet():
            c.start()
    except StartError:
        pass
    finally:
        del site.LOCAL.coordinator_address  # the method again
        blocker.close()
    return now() - t


def measure_in_process(args: argparse.Namespace, row) -> None:
    """Every figure with the magics' code driven from this process (no kernel)."""
    med = statistics.median
    c, start = started()
    row("start (s)", start)
    try:
        kills = {v: [kill_detection(c, v) for _ in range(args.repeats)] for v in (1, 0)}
        row("kill -9 p1 -> cell raises (s, median)", med(d for d, _ in kills[1]))
        row("kill -9 p0 -> cell raises (s, median)", med(d for d, _ in kills[0]))
        row("restart after a dead process (s, median)", med(r for v in kills for _, r in kills[v]))
        div = [divergence(c) for _ in range(args.repeats)]
        row("divergence: cell start -> raise (s, median)", med(d for d, _ in div))
        row("divergence: next cell incl. repair (s, median)", med(n for _, n in div))
        row("timeout 2 s: overshoot (s, median)",
            med(timeout_overshoot(c) for _ in range(args.repeats)))
        trials = interrupt_trials(c, args.trials)
        row(f"interrupt ({args.trials} trials): SIGINT -> back (s, median)", trials["back_median"])
        row("interrupt: SIGINT -> back (s, max)", trials["back_max"])
        row("interrupt: next cell incl. check/repair (s, median)", trials["next_cell_median"])
        row("interrupt: next cell incl. check/repair (s, max)", trials["next_cell_max"])
        row("interrupt: repairs needed", trials["repairs"])
        row("interrupt: loud errors on the old mesh", trials["loud_errors"])
        row("interrupt: WRONG values", trials["wrong_values"])
        row("reset of a healthy group (s, median)", med(reset_time(c) for _ in range(args.repeats)))
        stops = [stop_times(c) for _ in range(args.repeats)]
        row("stop, healthy (s, median)", med(h for h, _ in stops))
        row("stop, wedged in a collective (s, median)", med(w for _, w in stops))
    finally:
        c.stop()
    gone, left = orphan_cleanup()
    row("kernel SIGKILL -> all launched processes gone (s)", gone)
    row("processes left 30 s after kernel SIGKILL", left)
    row("start with a busy coordinator port -> StartError (s)", busy_port_start())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--mode", choices=["both", "shell", "kernel"], default="both",
                        help="in this process (shell), through a real Jupyter kernel, or both")
    args = parser.parse_args()
    results = Results("failures")
    figures: dict[str, dict[str, str]] = {"shell": {}, "kernel": {}}
    values: dict[str, dict[str, float | int | str]] = {"shell": {}, "kernel": {}}

    def recorder(mode: str):
        def row(name: str, value: float | int | str) -> None:
            text = f"{value:.2f}" if isinstance(value, float) else str(value)
            figures[mode][name] = text
            values[mode][name] = value
            print(f"{mode:<7} {name:<52} {text}", flush=True)
        return row

    print(f"jaxnb failure benchmark: 2 processes x 1 CPU device, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    if args.mode in ("both", "shell"):
        measure_in_process(args, recorder("shell"))
    if args.mode in ("both", "kernel"):
        from bench._kernel_failures import measure

        measure(args.repeats, args.trials, recorder("kernel"))
    names = list(dict.fromkeys([*figures["shell"], *figures["kernel"]]))
    print(f"\n{'figure':<52} {'in-process':>10} {'kernel':>10}")
    for name in names:
        print(f"{name:<52} {figures['shell'].get(name, '-'):>10} {figures['kernel'].get(name, '-'):>10}")
    results.add(repeats=args.repeats, trials=args.trials, processes=2,
                in_process=values["shell"], kernel=values["kernel"])
    results.write()


if __name__ == "__main__":
    main()
