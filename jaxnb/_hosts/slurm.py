"""``--engines slurm``: engines in one Slurm job, submitted through ipyparallel's Slurm launcher.

jaxnb keeps ipyparallel's :class:`SlurmEngineSetLauncher` (``sbatch`` a script whose
``srun`` starts one engine per task) and sets only its script: the job's name
(``jaxnb-CLUSTER``), ``--ntasks``, the user's partition, time limit, account and extra
``#SBATCH`` lines (checked in :class:`~jaxnb._core.options.ClusterOptions`: each stays one
option of one line), and the variables the job gets (``--export``: the engines' own and a
login's basics, never the kernel's whole environment). Process ``i`` is the job's task
``i`` (``SLURM_PROCID``), so the coordinator runs on task 0's node. Stopping cancels the
job and waits until Slurm no longer lists it; a job that does not start in time is named
with its state and Slurm's reason (``squeue``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from typing import Any

from ipyparallel.cluster.launcher import SlurmEngineSetLauncher
from traitlets.config import Config

from jaxnb._core.options import VARIABLE_NAME, ClusterOptions
from jaxnb._core.spelling import example
from jaxnb._core.state import Group
from jaxnb._hosts.site_jobs import Site

#: How long ``stop`` waits for Slurm to stop listing the cancelled job.
CANCEL_WAIT_SECONDS = 30.0
#: What the engines' Python and the job's shell need of the kernel's environment (when set
#: there), besides the engines' own variables: a login's basics, never keys or tokens.
BASICS = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
          "LD_LIBRARY_PATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX")


def missing() -> str | None:
    """Why ``--engines slurm`` cannot start here (no ``sbatch``), or ``None``."""
    if shutil.which("sbatch") is None:
        return (f"{example('engines', 'slurm')} needs sbatch on this machine's PATH; run the "
                "notebook on a Slurm login node (or load the Slurm module) first")
    return None


def exported(engine_env: dict[str, str], kernel_env: dict[str, str]) -> list[str]:
    """The variables a job exports (``--export``; Slurm adds its own ``SLURM_*``): the engines'
    own (jaxnb's, ipyparallel's and ``env=``) and the :data:`BASICS` the kernel has (``LC_*``
    too); the values come from ``sbatch``'s environment."""
    basics = [k for k in kernel_env if k in BASICS or k.startswith("LC_")]
    return sorted(k for k in {*engine_env, *basics} if VARIABLE_NAME.match(k))


def batch_template(
    lines: tuple[str, ...] = (), partition: str = "", time_limit: str = "", account: str = ""
) -> str:
    """The job script: ipyparallel's, with jaxnb's job name, the variables exported (filled in
    at submission: ``{exported}``), the user's partition, time limit, account and extra
    ``#SBATCH`` lines (braces are kept: the launcher formats the script)."""
    given = [f"--partition={partition}" if partition else "", f"--time={time_limit}" if time_limit else "",
             f"--account={account}" if account else "", *lines]
    extra = "".join(f"#SBATCH {line.replace('{', '{{').replace('}', '}}')}\n" for line in given if line)
    return (
        "#!/bin/sh\n"
        "#SBATCH --export={exported}\n"
        "#SBATCH --job-name=jaxnb-{cluster_id}\n"
        "#SBATCH --ntasks={n}\n"
        "#SBATCH --output={output_file}\n"
        f"{extra}"
        "srun {program_and_args}\n"
    )


def job_state(job_id: str) -> tuple[str, str] | None:
    """(state, Slurm's reason) of a job still listed by ``squeue`` (``None``: not listed)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T|%r"], capture_output=True,
                             text=True, timeout=10, check=False)
        line = out.stdout.strip().splitlines()
        if out.returncode == 0 and line:
            state, _, reason = line[0].partition("|")
            return state, reason
    return None


def job_steps(job_id: str) -> dict[str, str]:
    """Step id → state of a job's steps (``sacct`` when it keeps them, else ``squeue -s``)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i|%T"],
                             capture_output=True, text=True, timeout=10, check=False)
        return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line)
    return {}


class JaxnbSlurmEngineSetLauncher(SlurmEngineSetLauncher):
    """ipyparallel's Slurm engine launcher; the job gets only the variables :func:`exported`
    names; ``kill_all`` cancels the job and waits it out."""

    def write_batch_script(self, n: int = 1) -> None:
        self.context["exported"] = ",".join(exported(self.get_env(), dict(os.environ)))
        super().write_batch_script(n)

    def kill_all(self) -> None:
        """``scancel`` the job (every task on every node), then wait until Slurm drops it."""
        job_id = getattr(self, "job_id", None)
        if not job_id:
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=15, check=False)
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while time.monotonic() < deadline:
            state = job_state(job_id)
            if state is None or state[0] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING",
                                                 "SUSPENDED"):
                return
            time.sleep(0.2)


def explain_lost(engine_set: JaxnbSlurmEngineSetLauncher, task: int, host: str) -> str:
    """How task ``task`` (on ``host``) of the engines' job ended, as far as Slurm says: the job
    and its step, their state, and what ``srun``/``slurmstepd`` wrote to the job's output."""
    job = getattr(engine_set, "job_id", None)
    if not job:
        return ""
    step = f"{job}.0"  # srun's step: one task per engine
    where = f"task {task} on {host}"
    lines = _scheduler_lines(getattr(engine_set, "output_file", ""))
    said = f"; the job's output says: {' | '.join(lines)}" if lines else ""
    state = job_state(job)
    if state is None:
        return f"ended with step {step} of Slurm job {job} ({where}; the job has ended{said})"
    steps = job_steps(job)
    if step not in steps:
        return f"ended: step {step} of Slurm job {job} is gone ({where}; the job is {state[0]}{said})"
    return f"died in step {step} of Slurm job {job} ({where}; the step is {steps[step]}{said})"


def _scheduler_lines(path: str, keep: int = 3) -> list[str]:
    """The last lines ``srun`` and ``slurmstepd`` wrote to the job's output file (if readable)."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = [ln.strip() for ln in lines if ln.startswith(("srun:", "slurmstepd:"))]
    return found[-keep:]


def pending_note(engine_sets: list) -> str:
    """Why engines have not registered, as Slurm says (``""`` when no Slurm job is found)."""
    for engine_set in engine_sets:
        job_id = getattr(engine_set, "job_id", None)
        if isinstance(engine_set, JaxnbSlurmEngineSetLauncher) and job_id:
            state = job_state(job_id)
            if state is None:
                return f"; the Slurm job {job_id} is no longer listed (it ended: see its output)"
            what, reason = state
            if what == "PENDING":
                return (f"; the Slurm job {job_id} is still PENDING (reason: {reason}): the queue "
                        "did not start it; wait and start again, or pick another --partition")
            why = f" ({reason})" if reason not in ("", "None") else ""
            return f"; the Slurm job {job_id} is {what}{why}"
    return ""


class SlurmSite(Site):
    """``--engines slurm``: one Slurm job whose ``srun`` starts the engines on the nodes it picks."""

    name = "slurm"

    def missing(self) -> str | None:
        return missing()

    def configure(self, config: Config, options: ClusterOptions, engine_cmd: list[str], folder: str) -> None:
        """The job script (written in the cluster's own folder, not the notebook's)."""
        given = dict(options.slurm)
        config.JaxnbSlurmEngineSetLauncher.batch_template = batch_template(
            tuple(given["sbatch"].split("\n")) if given.get("sbatch") else (),
            given.get("partition", ""), given.get("time_limit", ""), given.get("account", ""))
        config.JaxnbSlurmEngineSetLauncher.batch_file_name = os.path.join(folder, "jaxnb-engines.sbatch")

    def launcher(self, options: ClusterOptions) -> type:
        return JaxnbSlurmEngineSetLauncher

    def pending_note(self, ipp_cluster: Any) -> str:
        return pending_note(list(ipp_cluster.engines.values()))

    def explain_lost(self, group: Group, lost: list[int]) -> dict[int, str]:
        """The job step's state, from the queue and what ``srun`` wrote."""
        for engine_set in group.ipp.engines.values() if group.ipp is not None else ():
            if isinstance(engine_set, JaxnbSlurmEngineSetLauncher):
                return {p: explain_lost(engine_set, p, group.processes[p].host) for p in lost}
        return {}
