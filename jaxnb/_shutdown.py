"""Stopping a cluster: every engine and the controller gone, fast, and nothing left behind.

Local processes are SIGKILLed all at once: a JAX engine has nothing to save,
and one blocked in a collective would ignore anything gentler. Remote engines
first leave ``jax.distributed``, then ipyparallel stops them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import ipyparallel as ipp
import psutil

from jaxnb._engine import process as engine_process
from jaxnb._startup import engine_launchers, key_files

#: How long stopped processes get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: How long remote engines get to leave jax.distributed before they are stopped.
REMOTE_SHUTDOWN_SECONDS = 2.0


def stop_all(ipp_cluster: ipp.Cluster, client: ipp.Client | None, local: bool) -> None:
    """Stop the engines and the controller of ``ipp_cluster``; remove its key files."""
    from jaxnb import _remote

    over_ssh = bool(_remote.ssh_sets(ipp_cluster))  # killed on their hosts below: no goodbyes
    if client is not None and not local and not over_ssh:
        _leave_group(client)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()
    engines = [lch.process for lch in engine_launchers(ipp_cluster) if getattr(lch, "process", None)]
    if not local:
        _remote.stop(ipp_cluster)  # SIGKILL on every host at once; close the ssh connections
    _kill_all(engines if local else [], ipp_cluster)
    with contextlib.suppress(Exception):
        ipp_cluster.stop_engines_sync()
    with contextlib.suppress(Exception):
        ipp_cluster.stop_controller_sync()
    with contextlib.suppress(Exception):
        ipp_cluster.remove_cluster_file()
    for path in key_files(ipp_cluster):
        with contextlib.suppress(OSError):
            os.unlink(path)


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie counts as exited)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_all(engines: list[psutil.Process], ipp_cluster: ipp.Cluster) -> None:
    """SIGKILL the engines, their children and the controller's process group at once; wait."""
    family = []
    for proc in engines:
        with contextlib.suppress(psutil.Error):
            family.extend(proc.children(recursive=True))
        family.append(proc)
    controller = getattr(ipp_cluster.controller, "process", None) if ipp_cluster.controller else None
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
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while family and time.monotonic() < deadline:
        family = [proc for proc in family if not _gone(proc)]
        if family:
            time.sleep(0.005)


def _gone(proc: psutil.Process) -> bool:
    """Exited. Our own children are reaped; others' zombies count as gone (init reaps them)."""
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
        if proc.ppid() != os.getpid():
            return True
    except psutil.NoSuchProcess:
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)
    return not psutil.pid_exists(proc.pid)


def _leave_group(client: ipp.Client) -> None:
    """Ask every engine to leave jax.distributed at once, so none waits for the others."""
    with contextlib.suppress(Exception):
        ar = client[:].apply_async(engine_process.shutdown)
        ar.wait(REMOTE_SHUTDOWN_SECONDS)
