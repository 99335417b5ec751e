"""The Slurm job script and the mpiexec arguments jaxnb gives ipyparallel's launchers (pure;
the lab runs them for real in tests/test_slurm.py and tests/test_mpi.py)."""

from __future__ import annotations

from jaxnb._core.host_entries import parse_hosts
from jaxnb._hosts import mpi, slurm


def test_job_script_has_the_users_options_and_keeps_their_braces():
    script = slurm.batch_template(("--gres=gpu:8", "--comment={x}"), "gpu", "1:00:00", "proj")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and lines[-1] == "srun {program_and_args}"
    assert "#SBATCH --ntasks={n}" in lines and "#SBATCH --job-name=jaxnb-{cluster_id}" in lines
    for line in ("--partition=gpu", "--time=1:00:00", "--account=proj", "--gres=gpu:8"):
        assert f"#SBATCH {line}" in lines
    assert "#SBATCH --comment={{x}}" in lines  # ipyparallel formats the script: {x} stays {x}
    assert "--partition" not in slurm.batch_template()


def test_mpiexec_gets_the_hosts_with_their_counts():
    args = mpi.mpi_args(parse_hosts("h1:2,bob@h2"), ["-o", "BatchMode=yes"], "127.0.0.1")
    assert args[:2] == ["--host", "h1:2,h2:1"]
    if mpi.is_openmpi():
        agent = args[args.index("plm_rsh_agent") + 1]
        assert agent == "ssh -o BatchMode=yes -l bob"
        assert args[args.index("oob_tcp_if_include") + 1] == "127.0.0.0/8"
