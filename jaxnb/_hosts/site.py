"""Where the engines run: the failure jobs that differ between this machine, hosts reached over
ssh, and nodes a batch launcher placed them on (mpi, slurm, ...).

Failure handling, start and stop ask ``site.of(group)`` and never branch on where the engines
run. Each job has one method; a site that cannot do a job says so (no stacks, no cut) and the
callers report what they could not do.
"""

from __future__ import annotations

import contextlib
import os
import signal as signals

from jaxnb._core.contract import STACK_SIGNAL, stack_file
from jaxnb._core.state import Group
from jaxnb._hosts import (
    processes,
    reachability,
    remote_exits,
    remote_launchers,
    remote_release,
    remote_stacks,
    sockets,
    ssh,
)

STOPPED = "was stopped by jaxnb (after a death in the group)"
#: How long survivors of a death get to disappear after SIGKILL.
KILL_WAIT_SECONDS = 2.0


class Site:
    """Engines placed by a batch launcher (mpi, slurm, pbs, ...): what ipyparallel itself can do."""

    name = "launcher"
    #: Their processes can be read here (CPU times, wait channel).
    inspects_processes = False
    #: A lost engine shows as one the controller dropped (its heartbeats stopped).
    lost_by_registration = True

    def explain_lost(self, group: Group, lost: list[int]) -> dict[int, str]:
        """How each process the controller dropped ended, where that can be found out (a
        Slurm job step, from the queue and what ``srun`` wrote)."""
        for engine_set in group.ipp.engines.values() if group.ipp is not None else ():
            if hasattr(engine_set, "explain_lost"):  # a batch job (Slurm): what its scheduler says
                return {p: engine_set.explain_lost(p, group.processes[p].host) for p in lost}
        return {}

    def exited(self, group: Group) -> dict[int, str]:
        """Processes whose engine is already known to have exited (before the controller drops
        it), and how each ended."""
        return {}

    def log(self, group: Group, p: int) -> str:
        """What process ``p``'s engine wrote to its log ("" when it cannot be read)."""
        return ""

    def request_stacks(self, group: Group, chosen: list[int]) -> dict[int, str]:
        """Ask processes to dump their stacks; the files (on this machine) to read them from."""
        return {}

    def can_cut(self, group: Group) -> bool:
        """Whether jaxnb may close the group's gloo connections (it must own the group: the
        group is re-initialised afterwards)."""
        return False

    def cut_collectives(self, group: Group) -> int:
        """Shut down every engine-to-engine gloo connection; how many were shut."""
        return 0

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        """Send ``signum`` to the processes (through ipyparallel: their nannies deliver it)."""
        engines = [group.processes[p].engine_id for p in chosen]
        group.client.send_signal(signum, targets=engines, block=True)

    def wait_killed(self, group: Group, chosen: list[int]) -> None:
        """After SIGKILL: wait until the processes are gone, where that can be seen."""

    def wait_answering(self, group: Group, timeout: float) -> list[str]:
        """Before a restart: wait (at most ``timeout`` s) until the hosts found unreachable
        answer again; those that did not."""
        return []


class LocalSite(Site):
    """Engines on this machine: children of the notebook kernel, signalled by pid."""

    name = "local"
    inspects_processes = True
    lost_by_registration = False  # their exit is read from the process itself

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

    def can_cut(self, group: Group) -> bool:
        return group.options.init and hasattr(os, "pidfd_open")

    def cut_collectives(self, group: Group) -> int:
        pids = [info.pid for info in group.processes]
        plan = sockets.gloo_plan({"here": sockets.connections(pids)}, group.coordinator)
        return sum(sockets.shut_down(int(pid), fds) for pid, fds in plan.get("here", {}).items())

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        for p in chosen:
            with contextlib.suppress(OSError):
                os.kill(group.processes[p].pid, signum)

    def wait_killed(self, group: Group, chosen: list[int]) -> None:
        launchers = [processes.launcher_of(group, group.processes[p].pid) for p in chosen]
        killed = [processes.launcher_process(lch) for lch in launchers if lch is not None]
        processes.wait_gone([k for k in killed if k is not None], KILL_WAIT_SECONDS, poll=0.01)


class SshSite(Site):
    """Engines on ``--hosts``, reached over ssh: logs, stacks and cuts are done on their hosts."""

    name = "ssh"

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

    def can_cut(self, group: Group) -> bool:
        return group.options.init and hasattr(os, "pidfd_open")

    def cut_collectives(self, group: Group) -> int:
        return remote_release.cut(group)

    def wait_answering(self, group: Group, timeout: float) -> list[str]:
        return reachability.wait_answering(group, timeout)

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        """SIGKILL over ssh on their hosts (all at once: the engine, the shell around it and
        its nanny; their files stay for the engines left there); other signals, and engines
        jaxnb's ssh launcher did not start, as a launcher's."""
        killing = signum == signals.SIGKILL
        launchers = {p: remote_launchers.launcher_of(group, p) for p in chosen} if killing else {}
        ssh.kill_each([lch for lch in launchers.values() if lch is not None], remove_files=False)
        others = [p for p in chosen if launchers.get(p) is None]  # e.g. mpiexec's ranks on --hosts
        if others:
            super().signal(group, others, signum)


LOCAL, SSH, LAUNCHER = LocalSite(), SshSite(), Site()


def of(group: Group) -> Site:
    """The site of ``group``'s engines."""
    if group.site is not None:
        return group.site
    if group.options.is_local:
        return LOCAL
    return SSH if group.options.hosts else LAUNCHER


def kill(group: Group, chosen: list[int]) -> None:
    """SIGKILL the processes and wait until they are gone (where that can be seen)."""
    where = of(group)
    with contextlib.suppress(Exception):
        where.signal(group, chosen, signals.SIGKILL)
    where.wait_killed(group, chosen)


def _truncate(path: str) -> None:
    with contextlib.suppress(OSError), open(path, "r+") as f:
        f.truncate()
