"""Stopping a cluster: every engine and the controller gone, fast, and nothing left behind.

The site (:mod:`jaxnb._hosts.site`) says how its engines stop. Local processes
are SIGKILLed all at once: a JAX engine has nothing to save, and one blocked in
a collective would ignore anything gentler. Engines on ssh hosts are SIGKILLed
on their hosts the same way (no goodbyes); engines a batch launcher placed (mpi,
with or without ``--hosts``; slurm) first leave ``jax.distributed``, then their
launcher stops them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from typing import Any

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.contract import EngineCall
from jaxnb._core.state import Group
from jaxnb._hosts import processes, site
from jaxnb._hosts.site import Site

#: How long stopped processes get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: How long remote engines get to leave jax.distributed before they are stopped.
REMOTE_SHUTDOWN_SECONDS = 2.0
_LEAVE_GROUP = EngineCall("jaxnb._engine.group.process:shutdown")


def stop_all(group: Group) -> None:
    """Stop the engines and the controller of ``group``; remove its key files and folder."""
    ipp_cluster, client, where = group.ipp, group.client, site.of(group)
    launched = [ipp_internals.launcher_process(lch) for lch in group.launchers.values()]
    group.clear()
    if client is not None and where.leaves_group_on_stop:
        with contextlib.suppress(Exception):  # every engine leaves at once: none waits
            client[:].apply_async(_LEAVE_GROUP).wait(REMOTE_SHUTDOWN_SECONDS)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()
    if ipp_cluster is not None:
        launchers = ipp_internals.engine_launchers(ipp_cluster)
        launched += [ipp_internals.launcher_process(lch) for lch in launchers]
        _stop_processes(ipp_cluster, where, launched)
    if group.stacks_dir is not None:
        shutil.rmtree(group.stacks_dir, ignore_errors=True)
        group.stacks_dir = None
    group.temp_folders.remove_all()  # its cut cells' full outputs (jaxnb-output-*)


def _stop_processes(ipp_cluster: Any, where: Site, launched: list[psutil.Process | None]) -> None:
    engines = where.stop_engines(ipp_cluster, launched)  # elsewhere: stopped there; here: to SIGKILL
    _kill_all(engines, ipp_cluster)
    with contextlib.suppress(Exception):
        ipp_cluster.stop_engines_sync()
    with contextlib.suppress(Exception):
        ipp_cluster.stop_controller_sync()
    with contextlib.suppress(Exception):
        ipp_cluster.remove_cluster_file()
    for path in ipp_internals.key_files(ipp_cluster):
        with contextlib.suppress(OSError):
            os.unlink(path)
    where.after_stop(ipp_cluster)  # the shared ssh connections' folder, once nothing uses it


def _kill_all(engines: list[psutil.Process], ipp_cluster: object) -> None:
    """SIGKILL the engines, their children and the controller's process group at once; wait."""
    family = []
    for proc in engines:
        with contextlib.suppress(psutil.Error):
            family.extend(proc.children(recursive=True))
        family.append(proc)
    controller = ipp_internals.controller_process(ipp_cluster)
    if controller is not None:
        with contextlib.suppress(psutil.Error):
            family.extend(controller.children(recursive=True))
        family.append(controller)
        with contextlib.suppress(OSError):
            if os.getpgid(controller.pid) == controller.pid:
                os.killpg(controller.pid, signal.SIGKILL)
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    processes.wait_gone(family, KILL_WAIT_SECONDS)
