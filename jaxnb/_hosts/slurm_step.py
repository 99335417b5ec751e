"""``--engines slurm`` inside an allocation: ``srun`` starts the engines as a step of it.

A kernel started inside a Slurm allocation (``salloc``, or a batch job that runs Jupyter) has
``SLURM_JOB_ID`` in its environment. There jaxnb submits no second job: it runs ``srun`` on
the allocation's nodes, through ipyparallel's MPI launcher with ``srun`` as its command (so
stopping kills that ``srun`` and its step; the allocation stays). The step gets the same
``--export`` list as a submitted job (:func:`jaxnb._hosts.slurm.exported`), and
``--partition``, ``--time-limit``, ``--account`` and each ``--sbatch=OPTION`` go to ``srun``,
which takes the same options (they must fit the allocation). Before ``srun``, the nodes are
checked over ssh (versions, ``--workdir``) as a submitted job's are (:mod:`.slurm_nodes`).
Process ``i`` is the step's task ``i`` (``SLURM_PROCID``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from typing import Any

from ipyparallel.cluster.launcher import MPIEngineSetLauncher
from traitlets import Unicode
from traitlets.config import Config

from jaxnb._core.contract import ENV_WORKDIR_BY_HOST
from jaxnb._core.options import ClusterOptions
from jaxnb._core.spelling import example
from jaxnb._core.state import Group
from jaxnb._hosts import slurm_nodes, ssh_connections
from jaxnb._hosts.mpi import end_group
from jaxnb._hosts.site_jobs import Site
from jaxnb._hosts.slurm import exported

#: The variable that says the kernel runs inside an allocation.
JOB_VARIABLE = "SLURM_JOB_ID"


def allocation() -> str | None:
    """The id of the allocation this kernel runs in (``SLURM_JOB_ID``), or ``None``."""
    job = os.environ.get(JOB_VARIABLE, "")
    return job if job.isdigit() else None


def missing() -> str | None:
    """Why engines cannot start in the allocation here (no ``srun``), or ``None``."""
    if shutil.which("srun") is None:
        return (f"{example('engines', 'slurm')} inside Slurm job {allocation()} needs srun on this "
                "machine's PATH; load the Slurm module first")
    return None


def srun_args(job: str, step_name: str, options: ClusterOptions) -> list[str]:
    """``srun``'s options after ``-n N``: the allocation, the step's name, a step that ends when
    one task fails, and the user's Slurm options."""
    given = dict(options.slurm)
    args = [f"--jobid={job}", f"--job-name={step_name}", "--kill-on-bad-exit=1"]
    args += [f"--partition={given['partition']}"] if given.get("partition") else []
    args += [f"--time={given['time_limit']}"] if given.get("time_limit") else []
    args += [f"--account={given['account']}"] if given.get("account") else []
    return args + (given["sbatch"].split("\n") if given.get("sbatch") else [])


def our_steps(job: str, name: str) -> list[tuple[str, str]]:
    """(step id, state) of job ``job``'s steps named ``name`` (``squeue -s``)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j|%T"],
                             capture_output=True, text=True, timeout=10, check=False)
        rows = [line.split("|") for line in out.stdout.split()]
        return [(row[0], row[2]) for row in rows if len(row) == 3 and row[1] == name]
    return []


class JaxnbSrunEngineSetLauncher(MPIEngineSetLauncher):
    """ipyparallel's MPI engine launcher with ``srun`` for ``mpiexec``: no ``--mpi`` on the
    engines, the step's variables named (``--export``); stopping cancels the step."""

    step_name = Unicode("", config=True, help="the step's name (srun --job-name)")

    @property
    def program(self) -> list[str]:
        return list(self.engine_cmd)  # no --mpi: the engines need no mpi4py

    def find_args(self) -> list[str]:
        names = exported(self.get_env(), dict(os.environ))
        at = len(self.mpi_cmd) + 2  # after `srun -n N`
        args = super().find_args()
        return [*args[:at], f"--export={','.join(names)}", *args[at:]]

    def kill_all(self) -> None:
        """``scancel`` the step (its tasks on every node), then end ``srun``; the allocation stays."""
        job = allocation()
        if job is not None and self.step_name:
            for step, _ in our_steps(job, self.step_name):
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(["scancel", step], capture_output=True, timeout=15, check=False)
        end_group(self.pid, 10)


class SlurmStepSite(Site):
    """``--engines slurm`` in a kernel inside an allocation: a step of it, started by ``srun``."""

    name = "slurm"

    def missing(self) -> str | None:
        return missing()

    def configure(self, config: Config, options: ClusterOptions, engine_cmd: list[str], folder: str) -> None:
        name = os.path.basename(folder)  # the cluster's own folder: jaxnb-…
        config.JaxnbSrunEngineSetLauncher.mpi_cmd = ["srun"]
        config.JaxnbSrunEngineSetLauncher.mpi_args = srun_args(allocation() or "", name, options)
        config.JaxnbSrunEngineSetLauncher.step_name = name

    def launcher(self, options: ClusterOptions) -> type:
        return JaxnbSrunEngineSetLauncher

    def start(self, ipp_cluster: Any, options: ClusterOptions, env: dict[str, str]) -> None:
        """The allocation's nodes checked over ssh (versions, ``--workdir``), then ``srun``."""
        job = allocation() or ""
        nodes, _ = slurm_nodes.job_nodes(job)
        control_dir = ssh_connections.new_control_dir()
        try:
            workdirs, said = slurm_nodes.check_nodes(job, nodes, options, control_dir)
        finally:
            ssh_connections.close_connections(control_dir, [address for _, address in nodes])
        for line in said:
            print(line)
        if workdirs:
            env[ENV_WORKDIR_BY_HOST] = json.dumps(workdirs)
        ipp_cluster.start_engines_sync(environment=env)

    def explain_lost(self, group: Group, lost: list[int]) -> dict[int, str]:
        """The step's state, as the queue says."""
        job = allocation()
        engine_set = next(iter(group.ipp.engines.values()), None) if group.ipp is not None else None
        name = getattr(engine_set, "step_name", "")
        if job is None or not name:
            return {}
        steps = our_steps(job, name)
        state = f"step {steps[-1][0]} is {steps[-1][1]}" if steps else "its step has ended"
        return {p: f"ended in Slurm allocation {job} ({state}; task {p} on {group.processes[p].host})"
                for p in lost}
