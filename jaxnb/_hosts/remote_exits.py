"""How engines on other hosts ended, and what they last wrote: read on their hosts (the shell
around each engine writes its exit status to its log, see :func:`jaxnb._hosts.ssh.reporting_exit`),
or, when its engine stopped beating while its ssh session still runs, that it is lost."""

from __future__ import annotations

import time
from typing import Any

import ipyparallel as ipp

from jaxnb._core.state import Group
from jaxnb._hosts import oom_killer, reachability, remote_launchers, ssh

#: What an engine that stopped beating while its ssh session still runs may be.
STOPPED_BEATING = "its host unreachable, or the engine hung"
#: How long an unregistered engine's ssh session may still take to report that the engine
#: exited: the controller drops an engine only after it was silent for
#: :data:`jaxnb._core.heartbeat.SILENCE_SECONDS`, and the session of a killed engine says so
#: within tenths of a second of the death (its wait on the host polls every 0.1 s).
EXIT_GRACE_SECONDS = 0.3


def exited_engines(ipp_cluster: ipp.Cluster | None) -> list[tuple[str, int, str]]:
    """(host, pid, last log lines) of every remote engine that has exited."""
    found = []
    for engine_set in remote_launchers.ssh_sets(ipp_cluster):
        for launcher in engine_set.launchers.values():
            if ssh.exited(launcher):
                found.append((launcher.location, launcher.pid, launcher.remote_tail()))
    return found


def exited_how(launcher: Any) -> str:
    """``was killed by SIGKILL on host``: read from its log on its host (the shell around it
    writes the status there)."""
    reachable = not reachability.unreachable_now(launcher.location)
    how = ssh.exit_status(launcher.remote_tail(5)) if reachable else None
    killed = how == "was killed by SIGKILL" and launcher.pid is not None  # by the OOM killer?
    if killed and int(launcher.pid) in oom_killer.killed_pids(*launcher.kernel_log()):
        how = oom_killer.KILLED
    return f"{how or 'exited'} on {launcher.location}"


def explain_lost(group: Group, processes: list[int]) -> dict[int, str]:
    """How each unregistered remote process ended: its engine exited (it says so, through the
    ssh session its launcher waits on: seen within tenths of a second), or else it stopped
    beating: the controller dropped it while that session still runs, so its host is lost (a
    cut link, a dead host) or the engine hangs. That host is taken as unreachable at once, with
    no ssh connection waited for (a cut link would cost ssh's connect timeout here); a restart
    asks it again over a fresh connection before leaving it out (:mod:`.reachability`)."""
    found: dict[int, str] = {}
    deadline = time.monotonic() + EXIT_GRACE_SECONDS
    for p in processes:
        launcher = remote_launchers.launcher_of(group, p)
        if not isinstance(launcher, ssh.FastSSHEngineLauncher):
            continue  # this machine's engine: jaxnb._hosts.processes sees how it ended
        while not launcher.exited and time.monotonic() < deadline:
            time.sleep(0.05)  # a killed engine: its session says so within tenths of a second
        if launcher.exited:
            found[p] = exited_how(launcher)
            continue
        host = launcher.location
        reachability.mark_unreachable(host)
        found[p] = f"is lost: its engine on {host} stopped beating ({STOPPED_BEATING})"
    return found


def log_of(group: Group, p: int) -> str:
    """Process ``p``'s engine log, read on its host ("" when its host is unreachable)."""
    launcher = remote_launchers.launcher_of(group, p)
    if launcher is None:
        return ""
    if not isinstance(launcher, ssh.FastSSHEngineLauncher):
        return str(launcher.get_output() or "")
    if reachability.unreachable_now(launcher.location):
        return ""
    return str(launcher.remote_tail())
