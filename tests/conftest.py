"""Shared fixtures: one real 2-process cluster for the tests that leave it healthy."""

from __future__ import annotations

import os

import psutil
import pytest

# The test process itself never initialises a JAX backend for the cluster tests;
# tests that need JAX locally run it in subprocesses with their own device count.
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def two_processes():
    """Start a 2-process cluster (1 CPU device each), yield it, stop it."""
    from jaxnb import JaxCluster

    c = JaxCluster(n=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def cluster():
    """A running 2-process cluster, shared by the tests that leave it healthy.

    Modules whose tests break their group on purpose have a cluster of their own
    (a module-scoped ``cluster`` fixture that also uses :func:`two_processes`).
    """
    yield from two_processes()


@pytest.fixture(scope="session")
def ip():
    """A real IPython shell with the jaxnb extension loaded."""
    shell = real_shell()
    shell.run_line_magic("load_ext", "jaxnb")
    return shell


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


@pytest.fixture
def shared_magics(ip, cluster):
    """The IPython shell, with the magics driving the shared cluster."""
    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(cluster, ip)
    yield ip
    use_cluster(previous, ip)


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
