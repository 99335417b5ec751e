"""Where the engines run: this machine, hosts reached over ssh, or the nodes a batch launcher
placed them on (``mpiexec``, with or without ``--hosts``; Slurm; any other ipyparallel launcher).

Start, stop and failure handling ask ``site.of(group)`` and never branch on where the engines
run. The site configures ipyparallel's cluster, chooses the engine launcher, checks the hosts,
starts the engines, orders them (process i on the i-th host, or the launcher's rank i), places
``jax.distributed``'s coordinator (on loopback here, else on process 0's host), says how many
warm spares to keep and how to stop; on a failure it reads logs, dumps stacks, cuts
collectives and sends signals where the engines are. Each job is one method of
:class:`~jaxnb._hosts.site_jobs.Site`, done there as ipyparallel itself can do it; each kind
overrides what it can do better:

- this machine (:mod:`.local_site`): the kernel's children, on loopback, signalled by pid;
- ssh hosts (:mod:`.ssh_site`): ``--hosts``, and a TPU VM slice (its own worker runs here);
- ``--engines mpi`` (:mod:`.mpi`) and ``--engines slurm`` (:mod:`.slurm`; inside an allocation
  a step of it, :mod:`.slurm_step`): their launcher's settings; another ``--engines`` name is
  ipyparallel's launcher as it is.
"""

from __future__ import annotations

import contextlib
import signal

from jaxnb._core.errors import ClusterStateError
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts.local_site import LocalSite
from jaxnb._hosts.mpi import MpiSite
from jaxnb._hosts.site_jobs import STOPPED, Site
from jaxnb._hosts.slurm import SlurmSite
from jaxnb._hosts.slurm_step import SlurmStepSite, allocation
from jaxnb._hosts.ssh_site import SshSite

__all__ = ["LAUNCHER", "LOCAL", "MPI", "SLURM", "SSH", "STOPPED", "Site", "check_resizes", "for_options",
           "kill", "of"]

LOCAL, SSH, MPI, SLURM, LAUNCHER = LocalSite(), SshSite(), MpiSite(), SlurmSite(), Site()
#: ``--engines slurm`` in a kernel inside an allocation (``SLURM_JOB_ID``): ``srun`` there.
SLURM_STEP = SlurmStepSite()
#: ``--engines`` names whose launcher jaxnb sets up itself (with or without ``--hosts``).
_BATCH: dict[str, Site] = {"mpi": MPI, "slurm": SLURM}
#: ``--engines`` names that mean jaxnb's own ssh launcher when ``--hosts`` are given.
_OVER_SSH = ("local", "ssh")
NOT_RESIZABLE = (
    "{site} clusters keep the size their launcher gave them; scaling and --min-processes work "
    "on local and --hosts clusters"
)


def for_options(options: ClusterOptions) -> Site:
    """The site a cluster started with ``options`` has."""
    if options.engines == "slurm" and allocation() is not None:
        return SLURM_STEP
    if options.engines in _BATCH:
        return _BATCH[options.engines]
    if options.hosts:
        return SSH if options.engines in _OVER_SSH else LAUNCHER
    return LOCAL if options.engines == "local" else LAUNCHER


def of(group: Group) -> Site:
    """The site of ``group``'s engines (``group.site`` when one was given)."""
    return group.site if group.site is not None else for_options(group.options)


def kill(group: Group, chosen: list[int]) -> None:
    """SIGKILL the processes and wait until they are gone (where that can be seen)."""
    where = of(group)
    with contextlib.suppress(Exception):
        where.signal(group, chosen, signal.SIGKILL)
    where.wait_killed(group, chosen)


def check_resizes(group: Group) -> None:
    """A one-line :class:`ClusterStateError` unless the group can be restarted at another size."""
    where = of(group)
    if not where.resizes:
        raise ClusterStateError(NOT_RESIZABLE.format(site=where.name))
