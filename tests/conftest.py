"""Shared fixtures: one real 2-process cluster for the tests that leave it healthy; the factories
of ``support/factories.py`` (clusters, labs, kernels of a given shape) for every module."""

from __future__ import annotations

import os
import signal
import time

import pytest


def _own_lab_subnet_and_records() -> None:
    """Under pytest-xdist (``bash dev test``), each worker builds its labs on a subnet of its
    own and keeps named clusters' records in a folder of its own, so two workers never meet."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    index = int(worker[2:])
    a, b, c = os.environ.get("JAXNB_LAB_SUBNET", "10.77.0").split(".")
    os.environ["JAXNB_LAB_SUBNET"] = f"{a}.{b}.{int(c) + 1 + index}"
    if "JAXNB_CLUSTERS_DIR" not in os.environ:
        import atexit
        import shutil
        import tempfile

        records = tempfile.mkdtemp(prefix=f"jaxnb-records-{worker}-")
        os.environ["JAXNB_CLUSTERS_DIR"] = records
        atexit.register(shutil.rmtree, records, ignore_errors=True)


_own_lab_subnet_and_records()  # before the lab module reads its subnet
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


#: Modules that take over a minute in CI (seconds, from its ``--durations``): started first.
SLOWEST_FIRST = {
    "test_tutorials.py": 290, "test_benches.py": 220, "test_recovery_hosts.py": 117,
    "test_attach_kernels.py": 104, "test_browser.py": 93, "test_tune_kernel.py": 75,
    "test_kernel_failures.py": 70, "test_failures.py": 67, "test_recovery.py": 66,
    "test_resize_hosts.py": 61, "test_wheel.py": 60,
}


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs engines, a kernel, the lab or a browser as ``engines``; run the
    docs' tests last, so the site they build shows the tutorials this run executed."""
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engines)
    # stable: the rest keep their order. The slowest modules go first, so that the two workers
    # of `bash dev test` (pytest-xdist, a module each at a time) end together.
    items.sort(key=lambda item: (item.path.name == "test_docs.py",
                                 -SLOWEST_FIRST.get(item.path.name, 0)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``JAXNB_TEST_TIMES=DIR``: each test's start and end (wall clock) and its worker, one
    line in ``DIR/WORKER.tsv``, to see how the two workers of ``bash dev test`` share the run."""
    folder = os.environ.get("JAXNB_TEST_TIMES")
    started = time.time()
    yield
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(folder, f"{worker}.tsv"), "a") as out:
            out.write(f"{started:.2f}\t{time.time():.2f}\t{item.nodeid}\n")


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
