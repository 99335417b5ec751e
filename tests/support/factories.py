"""The test suite's factories, as a pytest plugin (``tests/conftest.py`` registers it).

A test (or a module's fixture) asks for what it needs, of the shape it needs, and the
fixture's finaliser stops it, last made first, even when the test fails:

- ``make_cluster(n, **options)``: a started ``JaxCluster`` (no warm spares unless asked:
  half the engines on a 2-core machine); ``make_cluster.by_magic(ip, line)`` starts one with
  ``%jax_cluster LINE`` and puts back the notebook's previous cluster after;
- ``make_lab(n=2, slurm=False, mpi=False, **options)``: a lab of ssh hosts (``tests/lab``);
- ``make_kernel(start, *setup, env=None)``: a real Jupyter kernel with jaxnb loaded, its
  cluster started by ``%jax_cluster start START`` and the ``setup`` cells run.

These fixtures live as long as the module that uses them; :func:`started_kernel` (and
``JaxCluster`` as a context manager) serve a test that needs one of its own.
:func:`unavailable` is the one place that skips what this machine cannot run (no lab, no
browser, no Slurm), saying why, or fails it where ``JAXNB_REQUIRE_LAB=1`` (CI: a skip there
would hide tests that must run). :func:`free_port` finds a loopback port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterator
from typing import Any

import pytest

#: Set to 1 where lab, browser and Slurm tests must run (``.ci/run``): a missing piece fails them.
REQUIRE = "JAXNB_REQUIRE_LAB"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overcommits() -> bool:
    """This machine grants any allocation (``vm.overcommit_memory=1``, as on some GPU images):
    a 16 TiB array is not refused (``RESOURCE_EXHAUSTED``) but filled until the OOM killer ends
    the process, so the tests of a refused allocation cannot run here."""
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


#: For a test whose process must be refused an impossible allocation.
refused_allocations = pytest.mark.skipif(overcommits(), reason="vm.overcommit_memory=1 grants any allocation")


def unavailable(what: str, why: str | None) -> None:
    """Skip the test or module (``what``: which tests; ``why``: what is missing here), or fail
    it where ``JAXNB_REQUIRE_LAB=1``; nothing when ``why`` is empty (they can run)."""
    if not why:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{what} cannot run: {why} ({REQUIRE}=1 requires them)", pytrace=False)
    pytest.skip(f"{what} skipped: {why}", allow_module_level=True)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """These environment variables set for the duration; put back as they were after."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Factory:
    """Keeps what it made (each entered as a context manager) until :meth:`close`, last first."""

    def __init__(self) -> None:
        self._made = contextlib.ExitStack()

    def keep(self, made: contextlib.AbstractContextManager[Any]) -> Any:
        """Enter ``made`` and keep it until the factory closes; what it gave."""
        return self._made.enter_context(made)

    def close(self) -> None:
        self._made.close()

    def __enter__(self) -> Factory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Clusters(Factory):
    """Started clusters; each stopped when the factory closes."""

    def __call__(self, n: int | None = None, *, spares: int = 0, **options: Any) -> Any:
        """``JaxCluster(n, spares=spares, **options)``, started (``n``: JaxCluster's default, 2
        local processes or one per host)."""
        from jaxnb import JaxCluster

        return self.keep(JaxCluster(n=n, spares=spares, **options))

    def by_magic(self, ip: Any, line: str) -> Any:
        """A cluster started by ``%jax_cluster LINE`` in the shell ``ip``; see :func:`started_by_magic`."""
        return self.keep(started_by_magic(ip, line))


@contextlib.contextmanager
def started_by_magic(ip: Any, line: str) -> Iterator[Any]:
    """A cluster started with ``%jax_cluster LINE`` in the shell ``ip`` (``.shown``: what the
    start printed); at the end stopped, and the notebook's previous cluster put back."""
    from IPython.utils.capture import capture_output

    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        with capture_output() as shown:
            ip.run_line_magic("jax_cluster", line)
        cluster = current_cluster(ip)
        assert cluster is not None, shown.stdout + shown.stderr
        cluster.shown = shown
        yield cluster
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)


class Labs(Factory):
    """Labs of ssh hosts (``tests/lab``); each torn down when the factory closes."""

    def __call__(self, n: int = 2, *, slurm: bool = False, mpi: bool = False, **options: Any) -> Any:
        """A running ``Lab(n, **options)`` (with Slurm on its hosts if ``slurm``); jaxnb's ssh uses
        its client config. Skips (or fails, see :func:`unavailable`) where it cannot be built."""
        from lab.lab import Lab

        try:
            _lab_available(slurm, mpi)
        except BaseException:  # skipped: the folders given to the lab are still the lab's to remove
            for folder in (*options.get("path", ()), *options.get("private", ())):
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return self.keep(Lab(n, with_slurm=slurm, **options).running())


def _lab_available(slurm: bool, mpi: bool) -> None:
    """Skip (see :func:`unavailable`) unless the lab (with Slurm, with MPI) can run here."""
    from lab import slurm as lab_slurm
    from lab.lab import missing

    unavailable("lab tests (several ssh hosts)", missing())
    if slurm:
        unavailable("Slurm lab tests", lab_slurm.missing())
    if mpi:
        unavailable("MPI lab tests",
                    None if shutil.which("mpiexec") else "no mpiexec (apt-get install openmpi-bin)")


@contextlib.contextmanager
def started_kernel(start: str | None = "-n 2", *setup: str,
                   env: dict[str, str] | None = None) -> Iterator[Any]:
    """A real Jupyter kernel (``kernel_client.Kernel``) with jaxnb loaded; with ``start``, its
    cluster started by ``%jax_cluster start START``; then the ``setup`` cells, each checked.

    The kernel inherits this process's environment with ``env`` set. At the end its cluster
    is stopped (unless the kernel was killed) and the kernel shut down: nothing it started
    is left running.
    """
    from .kernel_client import Kernel

    with environment(**(env or {})):
        kernel = Kernel()
    with kernel:
        kernel.ok("%load_ext jaxnb")
        if start is not None:
            kernel.ok(f"%jax_cluster start {start}")
        for cell in setup:
            kernel.ok(cell)
        yield kernel
        if start is not None and kernel.manager.is_alive():
            kernel.ok("%jax_cluster stop")


def stop_orphaned(name: str) -> None:
    """Stop cluster ``name``, which a killed kernel left running (``python -m jaxnb stop``)."""
    import subprocess
    import sys

    stopped = subprocess.run([sys.executable, "-m", "jaxnb", "stop", name], capture_output=True,
                             text=True, timeout=120)
    assert stopped.returncode == 0, stopped


class Kernels(Factory):
    """Kernels as :func:`started_kernel` makes them; each shut down when the factory closes."""

    def __call__(self, start: str | None = "-n 2", *setup: str, env: dict[str, str] | None = None) -> Any:
        return self.keep(started_kernel(start, *setup, env=env))


@pytest.fixture(scope="module")
def make_cluster() -> Iterator[Clusters]:
    """Start clusters for this module's tests: ``make_cluster(n, **options)``; stopped after."""
    with Clusters() as factory:
        yield factory


@pytest.fixture(scope="module")
def make_lab() -> Iterator[Labs]:
    """Build labs of ssh hosts for this module's tests: ``make_lab(2, slurm=False, ...)``."""
    with Labs() as factory:
        yield factory


@pytest.fixture(scope="module")
def make_kernel() -> Iterator[Kernels]:
    """Start kernels for this module's tests: ``make_kernel("-n 2", *setup_cells)``."""
    with Kernels() as factory:
        yield factory


#: The fixtures above start engines, kernels or the lab (the ``engines`` tier).
HEAVY = {"make_cluster", "make_lab", "make_kernel"}
