"""Is every process alive? If not, say who died, how, and what it last printed."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import psutil

from jaxnb._outputs import label

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

STDERR_TAIL_LINES = 12


def dead_processes(cluster: JaxCluster) -> dict[int, str]:
    """Process index → how it ended, for every process that is no longer running."""
    dead: dict[int, str] = {}
    launchers = {getattr(lch, "process", None) and lch.process.pid: lch for lch in cluster._engine_launchers()}
    for info in cluster.processes:
        launcher = launchers.get(info.pid)
        if launcher is not None:
            how = _exit_of(launcher.process)
            if how is not None:
                dead[info.process_index] = how
    if not cluster.options.is_local and cluster._client is not None:
        registered = set(cluster._client.ids)
        for info in cluster.processes:
            if info.engine_id not in registered:
                dead.setdefault(info.process_index, "unregistered from the controller")
    return dead


def _exit_of(process: psutil.Process) -> str | None:
    try:
        if process.status() != psutil.STATUS_ZOMBIE and process.is_running():
            return None
    except psutil.NoSuchProcess:
        pass
    try:
        code = process.wait(timeout=0)
    except (psutil.TimeoutExpired, psutil.Error):
        return "exited"
    if code is None:
        return "exited"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def describe_dead(cluster: JaxCluster, dead: dict[int, str]) -> str:
    """A message naming each dead process with its host, pid, end and last stderr lines."""
    parts = []
    launchers = {lch.process.pid: lch for lch in cluster._engine_launchers() if getattr(lch, "process", None)}
    for p, how in sorted(dead.items()):
        info = cluster.processes[p]
        tail = ""
        launcher = launchers.get(info.pid)
        if launcher is not None:
            lines = [ln for ln in launcher.get_output().splitlines() if ln.strip()]
            if lines:
                tail = "\n    " + "\n    ".join(lines[-STDERR_TAIL_LINES:])
        parts.append(f"{label(p)} (pid {info.pid} on {info.host}) {how}.{tail}")
    who = ", ".join(label(p) for p in sorted(dead))
    return (
        f"process {who} died; the jax.distributed group is broken — run `%jax_cluster restart`.\n"
        + "\n".join(parts)
    )
