"""Before a Slurm job's engines start: its nodes checked over ssh, as ``--hosts`` are.

The job script waits for the notebook's word before its ``srun`` (see
:func:`jaxnb._hosts.slurm.batch_template`). Once Slurm runs the job, jaxnb asks which
nodes it has (``squeue``; each node's ``NodeAddr`` from ``sinfo``) and checks them as it
checks ``--hosts``: each node's Python, jax, jaxlib and jaxnb (:mod:`.preflight`), and
``--workdir`` (:mod:`.workdir`: copied where a node does not see the same folder). Only then
does it write the word on the job's batch node: where each node's workdir is. A node whose
versions differ ends the start, named, before any engine runs (the stop cancels the job).

Why over ssh and not in the job script: the copy must come from this machine, which a job
script cannot reach without a shared file system; ssh to the nodes of one's own running job
is what Slurm sites allow (``pam_slurm_adopt``) and what ``--hosts`` uses, so the checks are
``--hosts``' own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import HostEntry, is_host
from jaxnb._core.options import ClusterOptions
from jaxnb._core.spelling import example
from jaxnb._hosts import preflight, remote_start, ssh_connections

#: How often the job's state is asked while it has not started.
LOOK_SECONDS = 0.2
#: The word's folder on the batch node, for ssh (relative to the home folder).
_WORD_FOLDER = ".cache/jaxnb/slurm"


def _slurm(*args: str) -> str:
    """A Slurm client command's output ("" when it fails)."""
    try:
        out = subprocess.run(list(args), capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def job_nodes(job_id: str) -> tuple[list[tuple[str, str]], str]:
    """The running job's nodes as (name, address to reach it at), and its batch node's name."""
    listed = _slurm("squeue", "-h", "-j", job_id, "-o", "%N|%B").strip().split("|")
    if len(listed) != 2 or not listed[0]:
        raise StartError(f"Slurm does not say which nodes job {job_id} has (squeue); check the job")
    names = _slurm("scontrol", "show", "hostnames", listed[0]).split()
    found = dict(line.split("|", 1) for line in _slurm(
        "sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N|%o").split() if "|" in line)
    nodes = [(name, found.get(name) or name) for name in names]
    bad = [text for node in nodes for text in node if not is_host(text)]  # never an option
    if bad or not nodes:
        raise StartError(f"Slurm names job {job_id}'s nodes {bad or names!r}, which jaxnb will not "
                         "pass to ssh; check the job (squeue) and its nodes (sinfo)")
    return nodes, listed[1]


def check_nodes(
    job_id: str, nodes: list[tuple[str, str]], options: ClusterOptions, control_dir: str,
) -> tuple[dict[str, str], list[str]]:
    """The preflight and ``--workdir`` on every node; {hostname: its workdir} and lines to show.
    A :class:`StartError` names each node that cannot run an engine or whose versions differ."""
    entries = tuple(HostEntry(address) for _, address in nodes)
    names = {address: name if name == address else f"{name} ({address})" for name, address in nodes}
    forward = {"PYTHONPATH": os.environ["PYTHONPATH"]} if options.python is None and os.environ.get(
        "PYTHONPATH") else {}
    exclude = f"--exclude={','.join(n for n, _ in nodes)}"
    leave_out = f"leave them out of the job ({example('sbatch', [exclude], exclude)})"
    reports, lines = remote_start.check_versions(entries, options, forward, control_dir,
                                                 _WORD_FOLDER, names, leave_out)
    if lines:
        raise StartError(preflight.refusal(
            lines, len(reports), f"nodes of Slurm job {job_id}",
            "its engines did not start (the job is cancelled); fix them, or leave them out "
            f"of the job with {example('sbatch', ['--exclude=NODE'], '--exclude=NODE')}"))
    if not options.workdir:
        return {}, []
    placed, said = remote_start.place_workdir(options, [e.target for e in entries], control_dir)
    return {p.hostname: p.folder for p in placed}, said


def give_word(job_id: str, batch_address: str, workdirs: dict[str, str], control_dir: str) -> None:
    """Write the job's word on its batch node (atomically): its engines may start."""
    word = f"{_WORD_FOLDER}/{job_id}.go"
    command = f"mkdir -p {_WORD_FOLDER} && cat > {word}.part && mv -f {word}.part {word}"
    out = subprocess.run(
        ["ssh", *ssh_connections.ssh_options(control_dir), "--", batch_address, command],
        input=json.dumps(workdirs), capture_output=True, text=True, timeout=30,
    )
    if out.returncode != 0:
        said = " | ".join(out.stderr.strip().splitlines()[-3:])
        raise StartError(f"cannot tell Slurm job {job_id} on {batch_address} to start its "
                         f"engines over ssh: {said}")


def when_running(engine_set: Any, options: ClusterOptions) -> list[str]:
    """While the engines have not registered: once the job runs (asked at most every
    :data:`LOOK_SECONDS`), check its nodes and give its word, once; lines to show."""
    job_id = str(getattr(engine_set, "job_id", "") or "")
    if not job_id.isdigit() or getattr(engine_set, "word_given", False):
        return []
    if time.monotonic() < getattr(engine_set, "next_look", 0.0):
        return []
    engine_set.next_look = time.monotonic() + LOOK_SECONDS
    state = _slurm("squeue", "-h", "-j", job_id, "-o", "%T").strip()
    if state != "RUNNING":
        return []
    engine_set.word_given = True
    nodes, batch = job_nodes(job_id)
    control_dir = ssh_connections.new_control_dir()
    try:
        workdirs, said = check_nodes(job_id, nodes, options, control_dir)
        give_word(job_id, dict(nodes).get(batch, batch), workdirs, control_dir)
    finally:
        ssh_connections.close_connections(control_dir, [address for _, address in nodes])
    return said
