"""``--env`` on the batch launchers: Slurm (the job exports the names; the values come from
sbatch's environment, never the job script) and MPI (``mpiexec -x NAME``: the name on its
command line, never the value). Skipped (with the reason) where Slurm, the lab or ``mpiexec``
is missing (``.ci/run`` installs them)."""

from __future__ import annotations

import shutil
import tempfile

import psutil
import pytest
from IPython.utils.capture import capture_output
from support.factories import started_by_magic, unavailable

from jaxnb.magics import current_cluster, use_cluster

SECRET = "hunter2-launchers-7c"
READ = "import os\nprint('got', os.environ.get('JAXNB_T_KEY') == 'hunter2-launchers-7c')"


@pytest.fixture
def magics(ip):
    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        yield ip
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)


@pytest.mark.timeout(300)
def test_slurm_engines_get_the_variables_and_the_job_script_holds_only_names(make_lab, magics, capsys):
    lab = make_lab(2, slurm=True, private=(tempfile.mkdtemp(prefix="jaxnb-private-"),))
    with capture_output() as shown:
        magics.run_line_magic("jax_cluster", f"start --engines slurm -n 2 --address {lab.bridge_address} "
                              f"--partition lab --time-limit 10 --env JAXNB_T_KEY={SECRET}")
    cluster = current_cluster(magics)
    assert cluster is not None and cluster.running, shown.stdout
    engine_set = next(iter(cluster.group.ipp.engines.values()))
    with open(engine_set.batch_file) as f:
        script = f.read()
    assert "JAXNB_T_KEY" in script and SECRET not in script
    capsys.readouterr()
    magics.run_cell_magic("jax_cluster", "", READ)
    said = capsys.readouterr()
    assert "got True" in said.out and SECRET not in shown.stdout + said.out + said.err


@pytest.mark.engines
@pytest.mark.timeout(300)
def test_mpi_engines_get_the_variables_and_mpiexec_names_only_them(ip, capsys):
    if shutil.which("mpiexec") is None:
        unavailable("the mpi test", "no mpiexec (apt-get install openmpi-bin)")
    with started_by_magic(ip, f"start --engines mpi --env JAXNB_T_KEY={SECRET}") as cluster:
        launcher = next(iter(cluster.group.ipp.engines.values()))
        command = psutil.Process(launcher.pid).cmdline()
        assert "JAXNB_T_KEY" in command and not any(SECRET in part for part in command), command
        capsys.readouterr()
        ip.run_cell_magic("jax_cluster", "", READ)
        said = capsys.readouterr()
        assert "got True" in said.out and SECRET not in cluster.shown.stdout + cluster.shown.stderr + said.err
