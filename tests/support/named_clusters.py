"""Named clusters in real kernels: a private folder for their records, kernels with jaxnb
loaded, a cluster's processes (found from its supervisor), and ``python -m jaxnb``."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from support.factories import environment
from support.kernel_harness import Kernel


def recorded_in(folder: pathlib.Path) -> Iterator[pathlib.Path]:
    """A module fixture's body: ``JAXNB_CLUSTERS_DIR`` is ``folder`` (the kernels started meanwhile
    inherit it); at the end every cluster recorded there is stopped (a test that failed half-way
    leaves none running)."""
    with environment(JAXNB_CLUSTERS_DIR=str(folder)):
        try:
            yield folder
        finally:
            from jaxnb._attach import attachment
            from jaxnb._core import cluster_names as names

            for name in names.recorded_names():
                attachment.stop(name)


@pytest.fixture(scope="module", name="clusters_dir")
def clusters_dir_fixture(tmp_path_factory):
    """Where this module's named clusters are recorded (the kernels inherit it)."""
    yield from recorded_in(tmp_path_factory.mktemp("clusters"))


def kernel() -> Kernel:
    k = Kernel()
    k.ok("%load_ext jaxnb\nimport jaxnb")
    return k


def family(folder, name: str) -> list[psutil.Process]:
    """The supervisor of ``name`` and every process whose watchdog watches it (engines, spares,
    controller), found from the supervisor's own file and the processes' environment."""
    with open(folder / f"{name}.supervisor.json") as f:
        supervisor = psutil.Process(json.load(f)["supervisor"]["pid"])
    found = [supervisor]
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("JAXNB_PARENT_PID") == str(supervisor.pid):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def gone(processes: list[psutil.Process]) -> bool:
    return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def jaxnb_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxnb", *args], capture_output=True, text=True,
                          timeout=120)
