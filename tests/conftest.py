"""Shared fixtures: one real 2-process cluster for the tests that leave it healthy; the factories
of ``support/factories.py`` (clusters, labs, kernels of a given shape) for every module."""

from __future__ import annotations

import os
import signal

import pytest

pytest.register_assert_rewrite("support")  # the helpers' asserts explain themselves too
from support.clusters import real_shell  # noqa: E402
from support.factories import HEAVY, Clusters  # noqa: E402

pytest_plugins = ["support.factories"]

#: Fixtures that start engines, a Jupyter kernel, the ssh lab or a browser: a test using one
#: (directly or through another fixture) is in the ``engines`` tier, which ``bash dev test fast``
#: leaves out. Tests that start such things themselves carry ``@pytest.mark.engines``.
HEAVY_FIXTURES = {
    "cluster", "shared_magics", "lab", "server", "browser", "context", "kernel", "k",
    "kernel_env", "with_kernel", "desc", "loaded", "shell", "any_cluster", "two_by_two",
    *HEAVY,
}


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs engines, a kernel, the lab or a browser as ``engines``; run the
    docs' tests last, so the site they build shows the tutorials this run executed."""
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engines)
    items.sort(key=lambda item: item.path.name == "test_docs.py")  # stable: the rest keep their order


# The test process itself never initialises a JAX backend for the cluster tests;
# tests that need JAX locally run it in subprocesses with their own device count.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Tests interrupt as Jupyter does: SIGINT to this process, a KeyboardInterrupt in the main
# thread. A process started in the background (`cmd &`, nohup, some CI runners) inherits
# SIGINT ignored, and then Python never raises it: put Python's own handler back.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def cluster():
    """A running 2-process cluster, shared by the tests that leave it healthy.

    Modules whose tests break their group on purpose have a cluster of their own
    (a module-scoped ``cluster`` fixture made by ``make_cluster``).
    """
    with Clusters() as make:
        yield make()


@pytest.fixture(scope="session")
def ip():
    """A real IPython shell with the jaxnb extension loaded."""
    shell = real_shell()
    shell.run_line_magic("load_ext", "jaxnb")
    return shell


@pytest.fixture
def shared_magics(ip, cluster):
    """The IPython shell, with the magics driving the shared cluster."""
    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(cluster, ip)
    yield ip
    use_cluster(previous, ip)
