"""Collect every process's Python stack (``%jax_cluster stacks``), mapped to cell lines."""

from __future__ import annotations

import os
import re
import signal
import time
from typing import TYPE_CHECKING

from jaxnb._engine.stacks import STACK_SIGNAL
from jaxnb._outputs import label

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

DUMP_WAIT_SECONDS = 0.3
_CELL_FILE = re.compile(r'File "(?:/[^"]*/ipykernel_\d+/\d+\.py|<ipython-input-[^"]*>)", line (\d+)')


def collect(cluster: JaxCluster, processes: list[int] | None = None, cell_code: str = "") -> str:
    """Signal the processes to dump their stacks and return the dumps as one text."""
    chosen = cluster.process_indices if processes is None else processes
    paths = {}
    for p in chosen:
        info = cluster.processes[p]
        path = os.path.join(cluster._stacks_dir or "", f"jaxnb-stacks-{info.pid}.txt")
        paths[p] = path
        _truncate(path)
        _signal(cluster, p)
    time.sleep(DUMP_WAIT_SECONDS)
    sections = []
    for p in chosen:
        info = cluster.processes[p]
        text = _read(paths[p]) or "(no stack dump: the engine is on another host or not responding)"
        sections.append(f"{label(p)} pid {info.pid} on {info.host}:\n{map_cell_lines(text, cell_code)}")
    return "\n".join(sections)


def map_cell_lines(dump: str, cell_code: str) -> str:
    """Rewrite frames in the cell's code as ``cell line N: <source>``."""
    lines = cell_code.splitlines()

    def replace(match: re.Match) -> str:
        n = int(match.group(1))
        source = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        return f"cell line {n}: {source}" if source else f"cell line {n}"

    return _CELL_FILE.sub(replace, dump)


def _signal(cluster: JaxCluster, p: int) -> None:
    info = cluster.processes[p]
    if cluster.options.is_local:
        try:
            os.kill(info.pid, STACK_SIGNAL)
        except OSError:
            pass
        return
    try:
        cluster.client.send_signal(signal.SIGUSR1, targets=[info.engine_id], block=True)
    except Exception:  # noqa: BLE001 - a missing dump is reported in the text
        pass


def _truncate(path: str) -> None:
    try:
        with open(path, "r+") as f:
            f.truncate()
    except OSError:
        pass


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
