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


def test_job_script_waits_for_the_notebooks_word_before_its_engines_start():
    """The word (the nodes passed the preflight; where each node's --workdir is) comes over ssh
    (jaxnb._hosts.slurm_nodes); without it the job ends after the time given."""
    lines = slurm.batch_template(wait_seconds=30).splitlines()
    word = lines.index('word="$HOME/.cache/jaxnb/slurm/$SLURM_JOB_ID.go"')
    assert lines.index('while [ ! -f "$word" ]; do') > word
    assert "  if [ $polls -ge 150 ]; then" in lines  # 30 s in 0.2 s polls
    assert lines[-4:] == ['done', 'JAXNB_WORKDIR_BY_HOST=$(cat "$word"); export JAXNB_WORKDIR_BY_HOST',
                          'rm -f "$word"', "srun {program_and_args}"]
    # srun's step inherits the job's --export list: it must name the word's variable
    assert "JAXNB_WORKDIR_BY_HOST" in slurm.exported({}, {})
    assert "{" not in "".join(lines[word:-1])  # nothing there for ipyparallel to format


def test_mpiexec_gets_the_hosts_with_their_counts():
    args = mpi.mpi_args(parse_hosts("h1:2,bob@h2"), ["-o", "BatchMode=yes"], "127.0.0.1")
    assert args[:2] == ["--host", "h1:2,h2:1"]
    if mpi.is_openmpi():
        agent = args[args.index("plm_rsh_agent") + 1]
        assert agent == "ssh -o BatchMode=yes -l bob"
        assert args[args.index("oob_tcp_if_include") + 1] == "127.0.0.0/8"
