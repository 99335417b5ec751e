"""``Site``: every job that depends on where the engines run, one method each, for start, stop
and failure handling; done here as ipyparallel itself can do them, which is all that engines a
batch launcher placed allow (``--engines pbs``, ``lsf``, ... by ipyparallel's name).

The kinds that can do more override their jobs: this machine (:mod:`.local_site`), ssh hosts
(:mod:`.ssh_site`), ``mpiexec`` (:mod:`.mpi`) and Slurm (:mod:`.slurm`); :mod:`.site` says
which kind a cluster has. A site that cannot do a failure job says so (no stacks, no cut) and
the callers report what they could not do.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import psutil
from traitlets.config import Config

from jaxnb._core.contract import ENV_CONTROLLER_ADDRESS, EngineCall
from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import HostError, controller_address, default_address
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts import remote_start, remote_stop, ssh_config
from jaxnb._hosts.remote_start import HostCheck

STOPPED = "was stopped by jaxnb (after a death in the group)"
#: How long a signal sent through ipyparallel waits for the engines' replies.
SIGNAL_REPLY_SECONDS = 5.0
#: Asked of each engine to put the processes in order: its rank in the launcher's job.
LAUNCHER_RANK = EngineCall("jaxnb._engine.group.rank:launcher_rank")
#: Asked of process 0's engine: its host's address (the interface that routes here), a free port.
_HOST_ADDRESS = EngineCall("jaxnb._engine.group.process:host_address")
_FREE_PORT = EngineCall("jaxnb._engine.group.process:free_port")


class Site:
    """Engines placed by a batch launcher (mpi, slurm, pbs, ...): what ipyparallel itself can do."""

    name = "launcher"
    #: Whether the engines run on other hosts (their traffic is encrypted: :mod:`.encryption`).
    remote_engines = True

    # ---- start ----------------------------------------------------------------------------

    def missing(self) -> str | None:
        """Why engines cannot start here (the launcher's command is not installed), or ``None``."""
        return None

    def controller_ip(self, options: ClusterOptions) -> str:
        """Where the controller listens: ``--address``, or this machine's address on the
        interface that routes to ``--hosts`` (to the default route when the launcher picks)."""
        if options.address:
            return options.address
        if not options.hosts:  # the nodes are not known in advance
            return default_address()
        try:
            return controller_address(options.host_entries(), ssh_config.real_hostname)
        except HostError as exc:
            raise StartError(str(exc)) from None

    def engine_flags(self, options: ClusterOptions) -> list[str]:
        """What each engine's command adds: on ``--hosts`` the engines start (and import JAX)
        while the controller starts, so they wait for its connection file."""
        return [f"--IPEngine.wait_for_url_file={options.init_timeout:g}"] if options.hosts else []

    def engine_env(self, options: ClusterOptions) -> dict[str, str]:
        """The variables the engines need to find this machine: the controller's address (and,
        with this notebook's own interpreter on the hosts, its ``PYTHONPATH``)."""
        env = {ENV_CONTROLLER_ADDRESS: self.controller_ip(options)}
        if options.python is None and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the same interpreter, the same path
        return env

    def configure(self, config: Config, options: ClusterOptions, engine_cmd: list[str], folder: str) -> None:
        """Set ipyparallel's launcher settings (``folder``: the cluster's own files): on
        ``--hosts``, jaxnb's ssh settings, with which the launcher reaches them too."""
        if options.hosts:
            remote_start.configure(config, options, engine_cmd)

    def launcher(self, options: ClusterOptions) -> Any:
        """The engine set launcher that starts the engines (a class, or ipyparallel's name)."""
        return options.engines

    #: ipyparallel gives the engines the controller's connection info in their environment
    #: (else they read its file: here, or sent to their hosts).
    sends_connection_env = True

    def check_hosts(self, ipp_cluster: Any, options: ClusterOptions, env: dict[str, str]) -> HostCheck | None:
        """Before the controller starts: check ``--hosts`` in the background (preflight, and
        ``--workdir`` copies); ``None`` when there are no hosts to check."""
        if not options.hosts:
            return None
        return remote_start.start_launch(ipp_cluster, options, env, launch=False)

    def kernel_watchdog(self, ipp_cluster: Any, watchdog: dict[str, str]) -> dict[str, str]:
        """Variables with which the engines end when the notebook kernel does: none (they are
        not its children: their launcher ends them)."""
        return {}

    def start(self, ipp_cluster: Any, options: ClusterOptions, env: dict[str, str]) -> None:
        """Once the controller runs: start the engines."""
        ipp_cluster.start_engines_sync(environment=env)

    def deliver_connection_file(self, ipp_cluster: Any, options: ClusterOptions) -> None:
        """Engines just launched that wait for the controller's connection file get it (here
        there are none: the info is in their environment)."""

    def while_registering(self, ipp_cluster: Any, options: ClusterOptions) -> list[str]:
        """Called while the engines have not all registered: what their launcher's job needs
        from the notebook once it runs (none here); lines to show."""
        return []

    def pending_note(self, ipp_cluster: Any) -> str:
        """Why the engines have not registered yet, as their launcher says ("": it says nothing)."""
        return ""

    #: What each engine is asked to put the processes in order (``None``: the controller's order).
    order_by: EngineCall | None = LAUNCHER_RANK

    def order(self, group: Group, engine_ids: list[int], answers: list) -> list[int] | None:
        """``engine_ids`` in process order, from each engine's answer to :attr:`order_by`:
        process i is the launcher's rank i (``None``: an engine has no rank; keep the order)."""
        if None in answers:
            return None
        return [eid for _, eid in sorted(zip(answers, engine_ids, strict=True))]

    def coordinator_address(self, group: Group, first_engine: int) -> str:
        """``host:port`` for ``jax.distributed``'s coordination service, on process 0's host
        (``first_engine``): its address and a free port there, as its engine finds them."""
        engine = group.client[first_engine]
        host0 = engine.apply_sync(_HOST_ADDRESS)
        port = engine.apply_sync(_FREE_PORT, host0)
        return f"{host0}:{port}"

    def remember_launchers(self, group: Group) -> None:
        """Once joined: keep each process's launcher while ipyparallel still has it."""

    #: Whether it keeps warm spare engines (a batch job's size is fixed: no).
    keeps_spares = False
    #: Whether the group can be restarted at another size (``scale``, ``--min-processes``).
    resizes = False

    def spares(self, options: ClusterOptions) -> int:
        """How many warm spares to keep: ``--spares``, by default one per process, where the
        site keeps them at all."""
        if not self.keeps_spares:
            return 0
        return options.resolved_n() if options.spares is None else options.spares

    # ---- stop -----------------------------------------------------------------------------

    #: The engines leave ``jax.distributed`` before they are stopped (then their launcher
    #: stops them; engines jaxnb SIGKILLs itself need no goodbyes).
    leaves_group_on_stop = True

    def stop_engines(self, ipp_cluster: Any, launched: list[psutil.Process | None]) -> list[psutil.Process]:
        """Stop the engines where they run (their launcher ends its job; ssh connections are
        closed); the processes on this machine to SIGKILL with the controller (none)."""
        remote_stop.stop(ipp_cluster)
        return []

    def after_stop(self, ipp_cluster: Any) -> None:
        """Once ipyparallel has stopped too: remove the ssh connections' folder."""
        remote_stop.remove_connections_folder(ipp_cluster)

    # ---- failures -------------------------------------------------------------------------

    #: Their processes can be read here (CPU times, wait channel).
    inspects_processes = False
    #: A lost engine shows as one the controller dropped (its heartbeats stopped).
    lost_by_registration = True

    def explain_lost(self, group: Group, lost: list[int]) -> dict[int, str]:
        """How each process the controller dropped ended, where that can be found out."""
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

    #: It can close the engines' gloo connections (with ``pidfd_getfd``, where they run).
    cuts_collectives = False

    def can_cut(self, group: Group) -> bool:
        """Whether jaxnb may close the group's gloo connections (it must own the group: the
        group is re-initialised afterwards)."""
        return self.cuts_collectives and group.options.init and hasattr(os, "pidfd_open")

    def cut_collectives(self, group: Group) -> int:
        """Shut down every engine-to-engine gloo connection; how many were shut."""
        return 0

    def signal(self, group: Group, chosen: list[int], signum: int) -> None:
        """Send ``signum`` to the processes (through ipyparallel: their nannies deliver it),
        waiting at most :data:`SIGNAL_REPLY_SECONDS` for their replies: an engine whose step
        was killed never replies (ipyparallel's own wait has no end)."""
        engines = [group.processes[p].engine_id for p in chosen]
        replies = group.client.send_signal(signum, targets=engines, block=False)
        with contextlib.suppress(Exception):  # no reply: the process is gone, or going
            replies.result(timeout=SIGNAL_REPLY_SECONDS)

    def wait_killed(self, group: Group, chosen: list[int]) -> None:
        """After SIGKILL: wait until the processes are gone, where that can be seen."""

    def wait_answering(self, group: Group, timeout: float) -> list[str]:
        """Before a restart: wait (at most ``timeout`` s) until the hosts found unreachable
        answer again; those that did not."""
        return []

    def not_answering(self, group: Group, hosts: list[str], timeout: float) -> list[str]:
        """Those of ``hosts`` (left out of the group) that do not answer within ``timeout`` s."""
        return list(hosts)
