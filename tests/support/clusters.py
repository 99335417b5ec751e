"""Clusters for tests and benchmarks: start one, check it is healthy, read its totals, find its
processes."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from typing import Any

import psutil


def real_shell():
    """The process's one IPython shell (IPython allows a single instance per process)."""
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        shell = InteractiveShell.instance()
    else:
        from IPython.testing.globalipapp import start_ipython

        shell = start_ipython()
    # Render rich outputs as a notebook kernel does (a terminal shell keeps only text/plain).
    formatter = shell.display_formatter
    formatter.active_types = list(dict.fromkeys([*formatter.active_types, "text/html", "image/png"]))
    return shell


def ipyparallel_processes() -> list[psutil.Process]:
    """Every ipyparallel engine or controller process descended from this test process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "ipyparallel" in cmd or "jaxnb._engine" in cmd:
            found.append(proc)
    return found


def healthy(cluster: Any, setup: str | None = None) -> Any:
    """Restart ``cluster`` if a test left a process dead; run ``setup`` on the new processes."""
    from jaxnb._failures import detect

    if not cluster.running or detect.dead_processes(cluster.group):
        cluster.restart()
        if setup:
            cluster.run(setup)
    return cluster


def parse_totals(text: str) -> list[float]:
    """Every process's printed ``total`` (the last field of each line naming one)."""
    return [float(line.split()[-1]) for line in text.splitlines() if "total" in line]


def totals(cluster: Any, verify: str) -> list[float]:
    """Run the ``verify`` cell on every process (raw output) and read each one's total."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cluster.run(verify, all=True, timeout=60)
    return parse_totals(out.getvalue())


def in_cell(cluster: Any, processes: list[int]) -> bool:
    """True when each of ``processes`` runs a cell now (the stack it dumps on request is not
    idle): a test that acts on a running cell waits for this, not for a guessed time."""
    from jaxnb._failures import stacks

    dumps = stacks.read(stacks.request(cluster.group, processes))
    return all(dumps.get(p) and stacks.where(dumps[p]) != "idle" for p in processes)


def exited(pid: int) -> bool:
    """True once process ``pid`` has ended (a zombie waiting for its parent counts)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def on_flag(path: Any, action: Any, seconds: float = 120) -> threading.Thread:
    """Run ``action`` (on a thread) once the file ``path`` exists: a training loop writes it at
    the step a test acts on; nothing happens if it never appears within ``seconds``."""

    def wait() -> None:
        deadline = time.monotonic() + seconds
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        if os.path.exists(path):
            action()

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def wait_until(condition: Any, timeout: float = 60.0, what: str = "the condition") -> None:
    """Poll ``condition()`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.1)


def engine_pids(parent: int) -> set[int]:
    """The pids of the jaxnb engines that process ``parent`` started (its children)."""
    found = set()
    for proc in psutil.Process(parent).children():
        try:
            if "jaxnb._engine.boot.main" in " ".join(proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def lose_a_slot(parent: int, known: set[int], seconds: float = 120) -> threading.Thread:
    """A lost slot: SIGKILL the first engine ``parent`` starts that is not in ``known`` (a
    restart's engine, before it registers), once; on a thread, looking every 10 ms."""

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            new = engine_pids(parent) - known
            if new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(min(new), 9)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def spares_registered(cluster: Any, seconds: float = 120) -> set[int]:
    """Wait until the cluster has a spare for each process, registered; their launched pids."""
    deadline = time.monotonic() + seconds
    while len(cluster.group.spare_pids) < cluster.num_processes and time.monotonic() < deadline:
        time.sleep(0.05)
    want = cluster.num_processes + len(cluster.group.spare_pids)
    while len(cluster.client.ids) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(cluster.client.ids) >= want, "the spares never registered"
    return set(cluster.group.spare_pids)
