"""This machine: engines that are the notebook kernel's children, on loopback only.

They start with the controller and find its connection file themselves; they run without
ipyparallel's nanny (jaxnb signals them by pid) and watch the kernel and the controller, so
they end with either. Their processes are read here (exit status, CPU, stacks, sockets); a
stop SIGKILLs them all at once: a JAX engine has nothing to save, and one blocked in a
collective would ignore anything gentler.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

import psutil

from jaxnb._core import ipp_internals
from jaxnb._core.contract import ENV_CONTROLLER_PID, STACK_SIGNAL, stack_file
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts import cut_outcome, processes, sockets
from jaxnb._hosts.site_jobs import Site

#: How long survivors of a death get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 2.0


class LocalSite(Site):
    """Engines on this machine: children of the notebook kernel, signalled by pid."""

    name = "local"
    #: Engines on this machine: their traffic stays on loopback (not encrypted).
    remote_engines = False

    # ---- start ----------------------------------------------------------------------------

    def controller_ip(self, options: ClusterOptions) -> str:
        return "127.0.0.1"  # loopback only

    def engine_flags(self, options: ClusterOptions) -> list[str]:
        # No nanny process per engine: jaxnb signals local engines by pid (see _failures.free).
        # They may start before the controller has written its connection file: wait for it.
        return ["--IPEngine.enable_nanny=False", f"--IPEngine.wait_for_url_file={options.init_timeout:g}"]

    def engine_env(self, options: ClusterOptions) -> dict[str, str]:
        return {}

    # They find the controller's connection file themselves, so they can start (and import
    # JAX) while the controller is still starting.
    sends_connection_env = False

    def kernel_watchdog(self, ipp_cluster: Any, watchdog: dict[str, str]) -> dict[str, str]:
        """The kernel's pid and the files to remove when it dies, and the controller's pid."""
        env = dict(watchdog)
        controller = ipp_internals.controller_process(ipp_cluster)
        if controller is not None:
            env[ENV_CONTROLLER_PID] = str(controller.pid)
        return env

    order_by = None  # the controller's order: nothing to place

    def coordinator_address(self, group: Group, first_engine: int) -> str:
        """On loopback: this machine is process 0's host."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{sock.getsockname()[1]}"
    keeps_spares = True
    resizes = True

    # ---- stop -----------------------------------------------------------------------------

    leaves_group_on_stop = False  # SIGKILLed, all at once

    def stop_engines(self, ipp_cluster: Any, launched: list[psutil.Process | None]) -> list[psutil.Process]:
        return list({p.pid: p for p in launched if p is not None}.values())

    # ---- failures -------------------------------------------------------------------------

    inspects_processes = True
    lost_by_registration = False  # their exit is read from the process itself
    cuts_collectives = True

    def log(self, group: Group, p: int) -> str:
        launcher = processes.launcher_of(group, group.processes[p].pid)
        return "" if launcher is None else processes.launcher_log(launcher)

    def request_stacks(self, group: Group, chosen: list[int]) -> dict[int, str]:
        paths = {}
        for p in chosen:
            pid = group.processes[p].pid
            path = stack_file(group.stacks_dir or "", pid)
            if not os.path.exists(path):
                continue
            _truncate(path)
            if processes.signal_main_thread(pid, STACK_SIGNAL):
                paths[p] = path
        return paths

    def cut_collectives(self, group: Group) -> int:
        pids = [info.pid for info in group.processes]
        plan = sockets.gloo_plan({"here": sockets.connections(pids)}, group.coordinator)
        return cut_outcome.record("this machine", sockets.cut(plan.get("here", {})))

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        for p in chosen:
            with contextlib.suppress(OSError):
                os.kill(group.processes[p].pid, signum)

    def wait_killed(self, group: Group, chosen: list[int]) -> None:
        launchers = [processes.launcher_of(group, group.processes[p].pid) for p in chosen]
        killed = [processes.launcher_process(lch) for lch in launchers if lch is not None]
        processes.wait_gone([k for k in killed if k is not None], KILL_WAIT_SECONDS, poll=0.01)


def _truncate(path: str) -> None:
    with contextlib.suppress(OSError), open(path, "r+") as f:
        f.truncate()
