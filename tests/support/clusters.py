"""Clusters for tests and benchmarks: start one, check it is healthy, read its totals, find its
processes."""

from __future__ import annotations

import contextlib
import io
import socket
from typing import Any

import psutil


def two_processes():
    """Start a 2-process cluster (1 CPU device each), yield it, stop it."""
    from jaxnb import JaxCluster

    c = JaxCluster(n=2, spares=0).start()  # no warm spares: half the engines on a 2-core machine
    yield c
    c.stop()


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def wait_until(condition: Any, timeout: float = 60.0, what: str = "the condition") -> None:
    """Poll ``condition()`` until it is true; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.1)


def started_by_magic(ip: Any, line: str):
    """Start a cluster with ``%jax_cluster LINE`` in the shell ``ip``, yield it (``.shown``:
    what the start printed), stop it and put back the notebook's previous cluster."""
    from IPython.utils.capture import capture_output

    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        with capture_output() as shown:
            ip.run_line_magic("jax_cluster", line)
        c = current_cluster(ip)
        assert c is not None, shown.stdout + shown.stderr
        c.shown = shown  # type: ignore[attr-defined]
        yield c
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)
