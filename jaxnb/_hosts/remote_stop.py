"""Stopping engines that are not this machine's children: SIGKILL those on ssh hosts on their
hosts (all at once), end a batch launcher's job (``mpiexec``, ``scancel``), then close the
shared ssh connections and remove their folder."""

from __future__ import annotations

import contextlib
import os
import shutil

import ipyparallel as ipp

from jaxnb._hosts import reachability, remote_launchers, ssh, ssh_connections

#: How long a stop tries a host found unreachable lately before leaving its engines be.
RETRY_SECONDS = 1.5


def stop(ipp_cluster: ipp.Cluster) -> None:
    """SIGKILL every remote engine on its host (all at once), then close the ssh connections."""
    directory = remote_launchers.control_dir(ipp_cluster)
    for key, engine_set in list(ipp_cluster.engines.items()):
        if isinstance(engine_set, ssh.FastSSHEngineSetLauncher):
            # Not on hosts still unreachable: each try would wait out ssh's timeout (5 s) for
            # nothing (a --min-processes run going on without them stops its group). A host
            # found unreachable lately gets one short try first: it may be back.
            launchers = list(engine_set.launchers.values())
            still = _still_unreachable({getattr(lch, "location", "") for lch in launchers}, directory)
            cut = [lch for lch in launchers if getattr(lch, "location", "") in still]
            for launcher in cut:
                launcher.abandon()
            ssh.kill_each([lch for lch in launchers if lch not in cut])
            ipp_cluster.engines.pop(key)  # done: ipyparallel's own stop would ssh again
        elif hasattr(engine_set, "kill_all"):  # mpiexec: ends its ranks on every host
            engine_set.kill_all()
    if directory:
        targets = list(ipp_cluster.config.SSHEngineSetLauncher.get("engines", {}))
        ssh_connections.close_connections(directory, targets)


def _still_unreachable(hosts: set[str], directory: str) -> set[str]:
    """Of ``hosts``, those found unreachable lately that do not answer a short try now (those
    that answer are remembered as reachable again)."""
    remembered = sorted(h for h in hosts if reachability.unreachable_now(h))
    if not remembered:
        return set()
    still = set(ssh_connections.wait_answering(remembered, directory, RETRY_SECONDS))
    for host in set(remembered) - still:
        reachability.answered(host)
    return still


def remove_connections_folder(ipp_cluster: ipp.Cluster) -> None:
    """Remove the shared ssh connections' folder (``jaxnb-ssh-*``), once nothing uses them."""
    with contextlib.suppress(Exception):
        folder = remote_launchers.control_dir(ipp_cluster)
        if os.path.basename(folder).startswith("jaxnb-ssh-"):
            shutil.rmtree(folder, ignore_errors=True)
