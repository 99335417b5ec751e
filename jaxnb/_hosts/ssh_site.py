"""Hosts reached over ssh (``--hosts``; a TPU VM slice, whose own worker runs here): jaxnb's
ssh launcher starts the engines.

The hosts are checked and their engines launched while the controller starts; the engines
wait on their hosts for the controller's connection file, sent once it is written. Process 0
runs on the first host, and so on. Logs, stack dumps, cuts and SIGKILL are done on the hosts,
over the shared ssh connections; a stop SIGKILLs every engine on its host (no goodbyes).
"""

from __future__ import annotations

import signal as signals
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts import (
    reachability,
    remote_exits,
    remote_launchers,
    remote_release,
    remote_stacks,
    remote_start,
    ssh,
)
from jaxnb._hosts.remote_start import HostCheck
from jaxnb._hosts.site_jobs import STOPPED, Site

#: Asked of each engine to find its launcher: its pid and its parent's (the shell around it).
ENGINE_PIDS = EngineCall("jaxnb._engine.group.process:pids")


class SshSite(Site):
    """Engines on ``--hosts``, reached over ssh: logs, stacks and cuts are done on their hosts."""

    name = "ssh"

    # ---- start ----------------------------------------------------------------------------

    def launcher(self, options: ClusterOptions) -> Any:
        return ssh.FastSSHEngineSetLauncher

    sends_connection_env = False  # the file is sent to every host (they wait for it)

    def check_hosts(self, ipp_cluster: Any, options: ClusterOptions, env: dict[str, str]) -> HostCheck | None:
        """Check the hosts, then launch their engines, in the background."""
        return remote_start.start_launch(ipp_cluster, options, env, launch=True)

    def start(self, ipp_cluster: Any, options: ClusterOptions, env: dict[str, str]) -> None:
        """Launched with the host check: they get the connection file."""
        self.deliver_connection_file(ipp_cluster, options)

    def deliver_connection_file(self, ipp_cluster: Any, options: ClusterOptions) -> None:
        remote_start.send_connection_file(ipp_cluster, options.init_timeout)

    order_by = ENGINE_PIDS

    def order(self, group: Group, engine_ids: list[int], answers: list) -> list[int] | None:
        """Process 0 on the first host, and so on (a TPU slice's order)."""
        return remote_launchers.host_order(group, engine_ids, answers)

    def remember_launchers(self, group: Group) -> None:
        for p in group.indices:
            launcher = remote_launchers.launcher_of(group, p)
            if launcher is not None:  # its engine just joined: its host answers (a stop kills there)
                reachability.answered(getattr(launcher, "location", ""))

    keeps_spares = True  # as many on each host as the group has there
    resizes = True

    # ---- stop -----------------------------------------------------------------------------

    leaves_group_on_stop = False  # SIGKILLed on their hosts

    # ---- failures -------------------------------------------------------------------------

    cuts_collectives = True

    def explain_lost(self, group: Group, lost: list[int]) -> dict[int, str]:
        return remote_exits.explain_lost(group, lost)

    def log(self, group: Group, p: int) -> str:
        return remote_exits.log_of(group, p)

    def exited(self, group: Group) -> dict[int, str]:
        """Seen by the launcher's wait on the host (within a few tenths of a second), seconds
        before the controller misses the heartbeats; how it ended is read from its log once."""
        found = {}
        for info in group.processes:
            launcher = group.remote_launchers.get(info.process_index)
            if launcher is None or not ssh.exited(launcher):
                continue
            if getattr(launcher, "closing", False):  # jaxnb SIGKILLed it (a survivor of a death)
                found[info.process_index] = STOPPED
                continue
            if getattr(launcher, "exit_how", None) is None:
                launcher.exit_how = remote_exits.exited_how(launcher)
            found[info.process_index] = launcher.exit_how
        return found

    def request_stacks(self, group: Group, chosen: list[int]) -> dict[int, str]:
        return remote_stacks.request_stacks(group, chosen)

    def cut_collectives(self, group: Group) -> int:
        return remote_release.cut(group)

    def wait_answering(self, group: Group, timeout: float) -> list[str]:
        return reachability.wait_answering(group, timeout)

    def not_answering(self, group: Group, hosts: list[str], timeout: float) -> list[str]:
        return reachability.not_answering(group, hosts, timeout)

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        """SIGKILL over ssh on their hosts (all at once: the engine, the shell around it and
        its nanny; their files stay for the engines left there); other signals, and engines
        whose launcher is not known, as a launcher's."""
        killing = signum == signals.SIGKILL
        launchers = {p: remote_launchers.launcher_of(group, p) for p in chosen} if killing else {}
        ssh.kill_each([lch for lch in launchers.values() if lch is not None], remove_files=False)
        others = [p for p in chosen if launchers.get(p) is None]
        if others:
            super().signal(group, others, signum)
