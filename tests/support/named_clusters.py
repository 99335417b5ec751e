"""Named clusters in tests: a folder for their records that the kernels inherit, stopped at the
end whatever happened, and the processes of one (to check that none is left)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import psutil

from .factories import environment


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


def family(folder: pathlib.Path, name: str) -> list[psutil.Process]:
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
    """Whether every one of ``processes`` has ended."""
    return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
