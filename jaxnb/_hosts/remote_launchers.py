"""The ssh launchers of a cluster's engines on other hosts: which launcher started each
process, and the ``--hosts`` order they give the processes.

ipyparallel forgets a launcher as soon as its engine exits, which is exactly when jaxnb needs
it (to read how the engine ended, on its host): each one found is kept in the group.
"""

from __future__ import annotations

from typing import Any

import ipyparallel as ipp

from jaxnb._core.state import Group
from jaxnb._hosts import ssh


def ssh_sets(ipp_cluster: ipp.Cluster | None) -> list[ssh.FastSSHEngineSetLauncher]:
    """The cluster's engine sets started over ssh."""
    if ipp_cluster is None:
        return []
    return [s for s in ipp_cluster.engines.values() if isinstance(s, ssh.FastSSHEngineSetLauncher)]


def control_dir(ipp_cluster: ipp.Cluster | None) -> str:
    """The shared ssh connections' folder chosen for this cluster ("" when none)."""
    if ipp_cluster is None:
        return ""
    return str(ipp_cluster.config.FastSSHEngineSetLauncher.get("control_dir", ""))


def launcher_of(group: Group, p: int) -> Any:
    """The launcher that started process ``p``'s engine: matched by the engine's pid on its
    host, or its parent's (the shell around a remote engine)."""
    if p in group.remote_launchers:  # kept: ipyparallel forgets a launcher once its engine exits
        return group.remote_launchers[p]
    info = group.processes[p]
    pids = {pid for pid in (info.pid, getattr(info, "parent_pid", 0)) if pid > 1}
    for engine_set in ssh_sets(group.ipp):
        for launcher in engine_set.launchers.values():
            if ssh.started_pid(launcher) in pids:
                group.remote_launchers[p] = launcher
                return launcher
    return None


def host_order(group: Group, engine_ids: list[int], family: list) -> list[int]:
    """``engine_ids`` (whose engines have the (pid, parent pid) in ``family``) in the order of
    ``--hosts``: process 0 runs on the first host, as JAX numbers a TPU slice's workers."""
    targets = list(group.ipp.config.SSHEngineSetLauncher.get("engines", {}))
    rank = {}
    for engine_set in ssh_sets(group.ipp):
        for launcher in engine_set.launchers.values():
            target, i = ssh.place(launcher)
            if target in targets:
                rank[launcher.pid] = (targets.index(target), i)

    def key(k: int) -> tuple[int, int]:
        pid, parent = family[k]
        return rank.get(pid) or rank.get(parent) or (len(targets), k)

    order = sorted(range(len(engine_ids)), key=key)
    return [engine_ids[k] for k in order]
