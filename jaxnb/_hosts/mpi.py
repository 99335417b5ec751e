"""``--engines mpi``: engines started by ``mpiexec`` through ipyparallel's MPI launcher.

jaxnb keeps ipyparallel's :class:`MPIEngineSetLauncher` and changes only its
arguments: the engines do not initialise MPI themselves (no ``--mpi``, so no
``mpi4py`` is needed: ``jax.distributed`` is the group, MPI only starts the
processes); ``--hosts`` becomes ``mpiexec --host``; every variable the engines
need is exported to the remote ranks (OpenMPI ``-x``); ``mpiexec`` reaches the
hosts with jaxnb's ssh settings (``plm_rsh_agent``) and talks to them only on
the network that routes to them; as root it is allowed to run (OpenMPI refuses
otherwise). Stopping kills ``mpiexec``'s process group, which ends every rank.
Without ``--hosts``, ``mpiexec`` starts every rank on this machine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import shutil
import signal
import subprocess
from typing import Any

import psutil
from ipyparallel.cluster.launcher import MPIEngineSetLauncher
from traitlets import List, Unicode
from traitlets.config import Config

from jaxnb._core.host_entries import HostEntry
from jaxnb._core.options import ClusterOptions
from jaxnb._core.spelling import example
from jaxnb._hosts import ssh_connections
from jaxnb._hosts.site_jobs import Site


def missing() -> str | None:
    """Why ``--engines mpi`` cannot start here (no ``mpiexec``), or ``None``."""
    if shutil.which("mpiexec") is None:
        return (f"{example('engines', 'mpi')} needs mpiexec on this machine's PATH; install MPI "
                "(e.g. apt-get install openmpi-bin) or load its module")
    return None


def is_openmpi() -> bool:
    """Whether ``mpiexec`` is OpenMPI's (its flags differ from MPICH's)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["mpiexec", "--version"], capture_output=True, text=True, timeout=10)
        return "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr
    return False


def network_of(address: str) -> str | None:
    """The CIDR network of this machine's interface that has ``address`` (``None``: not found)."""
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.address == address and addr.netmask:
                return str(ipaddress.ip_network(f"{address}/{addr.netmask}", strict=False))
    return None


def mpi_args(entries: tuple[HostEntry, ...], ssh_args: list[str], controller_ip: str) -> list[str]:
    """``mpiexec`` arguments for ``--hosts`` (OpenMPI's; other MPIs: hosts only)."""
    args: list[str] = []
    if entries:
        args += ["--host", ",".join(f"{e.host}:{e.count}" for e in entries)]
    if not is_openmpi():
        return args
    if entries:
        user = next((e.user for e in entries if e.user), None)
        ssh = " ".join(shlex.quote(a) for a in ["ssh", *ssh_args, *(["-l", user] if user else [])])
        args += ["--mca", "plm_rsh_agent", ssh]
        network = network_of(controller_ip)
        if network:  # mpiexec and its daemons talk on the hosts' network only
            args += ["--mca", "oob_tcp_if_include", network, "--mca", "btl_tcp_if_include", network]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")
    return args


class JaxnbMPIEngineSetLauncher(MPIEngineSetLauncher):
    """ipyparallel's MPI engine launcher: no ``--mpi`` on the engines, the environment exported."""

    exported = List(Unicode(), config=True, help="variables exported to every rank (OpenMPI -x)")

    @property
    def program(self) -> list[str]:
        return list(self.engine_cmd)  # no --mpi: the engines need no mpi4py

    def find_args(self) -> list[str]:
        args = super().find_args()
        if not is_openmpi():
            return args
        names = sorted({*self.get_env(), *self.exported})
        exports = [part for name in names for part in ("-x", name)]
        at = len(self.mpi_cmd) + 2  # after `mpiexec -n N`
        return [*args[:at], *exports, *args[at:]]

    def signal(self, sig: int) -> None:
        """Signal mpiexec's whole process group (its daemons and local ranks)."""
        if self.state == "running" and self.pid > 1:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, sig)

    def kill_all(self) -> None:
        """SIGTERM mpiexec (it ends the ranks on every host), then SIGKILL what is left."""
        end_group(self.pid, 5)


def end_group(pid: Any, seconds: float) -> None:
    """SIGTERM the process group of launcher ``pid`` (mpiexec, srun), wait up to ``seconds`` for
    it, then SIGKILL what is left."""
    if not isinstance(pid, int) or pid <= 1:
        return
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).wait(seconds)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


class MpiSite(Site):
    """``--engines mpi``: ``mpiexec`` starts the engines, on ``--hosts`` or on this machine."""

    name = "mpi"

    def missing(self) -> str | None:
        return missing()

    def configure(self, config: Config, options: ClusterOptions, engine_cmd: list[str], folder: str) -> None:
        super().configure(config, options, engine_cmd, folder)  # --hosts: jaxnb's ssh settings
        ssh_args = ssh_connections.ssh_options(config.FastSSHEngineSetLauncher.get("control_dir") or "/tmp")
        config.JaxnbMPIEngineSetLauncher.mpi_args = mpi_args(
            options.host_entries(), ssh_args, self.controller_ip(options))

    def launcher(self, options: ClusterOptions) -> type:
        return JaxnbMPIEngineSetLauncher
