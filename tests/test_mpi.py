"""``--engines mpi`` for real: OpenMPI's ``mpiexec`` starts the engines on two lab hosts over the
lab's ssh, through ipyparallel's MPI launcher; ``jax.distributed`` joins them; ``stop``
leaves no ``mpiexec``, ``orted`` or ``prted``. Skipped (with the reason) where the lab cannot
be built or ``mpiexec`` is missing (``.ci/run`` installs ``openmpi-bin``)."""

from __future__ import annotations

import shutil
import tempfile
import time

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from support.clusters import wait_until
from support.factories import started_by_magic, unavailable

from jaxnb._core import ipp_internals
from jaxnb._hosts import processes
from jaxnb.magics import current_cluster, use_cluster

PSUM = """\
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ("i",))
x = jax.make_array_from_process_local_data(
    jax.sharding.NamedSharding(mesh, P("i")), np.full((1,), jax.process_index() + 1.0, np.float32))
total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=P("i"),
                              out_specs=P()))(x)
print("psum", float(total.addressable_data(0)[0]), "on", jax.process_count(), "processes")
"""


@pytest.fixture(scope="module")
def mpi_lab(make_lab):
    private = tempfile.mkdtemp(prefix="jaxnb-private-")  # the hosts do not see what is in it
    return make_lab(2, mpi=True, private=(private,))


@pytest.mark.engines
def test_mpi_start_psum_across_hosts_stop_leaves_nothing(mpi_lab, ip, capsys):
    """With a --workdir the hosts lack: each rank starts in its host's copy."""
    previous = current_cluster(ip)
    use_cluster(None, ip)
    project = mpi_lab.private_project("proj")
    copies = []
    try:
        with capture_output() as shown:
            ip.run_line_magic("jax_cluster", f"start --engines mpi --hosts {','.join(mpi_lab.addresses)} "
                              f"--workdir {project}")
        lines = [ln for ln in shown.stdout.splitlines() if " copied to " in ln]
        copies = [ln.split(":", 2)[2].split(" (")[0] for ln in lines]
        assert len(copies) == 2, shown.stdout
        cluster = current_cluster(ip)
        assert cluster is not None and cluster.running, shown.stdout
        assert [p.host for p in cluster.processes] == ["labhost1", "labhost2"]
        for p, host in zip(cluster.processes, mpi_lab.hosts, strict=True):
            assert p.pid in host.pids()  # each rank in its host's namespace
        assert cluster.coordinator_address.rsplit(":", 1)[0] == cluster.processes[0].address
        launcher = next(iter(cluster.group.ipp.engines.values()))
        assert type(launcher).__name__ == "JaxnbMPIEngineSetLauncher"
        assert psutil.Process(launcher.pid).name() in ("mpiexec", "orterun")
        assert cluster.group.client.curve_serverkey  # the ranks reach the controller encrypted
        capsys.readouterr()
        ip.run_cell_magic("jax_cluster", "", "import mymodel\n" + PSUM)
        assert "psum 3.0 on 2 processes" in capsys.readouterr().out
        ip.run_line_magic("jax_cluster", "stop")
        assert not psutil.pid_exists(launcher.pid) or psutil.Process(launcher.pid).status() == "zombie"
        deadline = time.monotonic() + 10  # the ranks end on their hosts once mpiexec is gone
        while (left := mpi_lab.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, left
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)


def test_mpi_without_mpiexec_is_one_line(ip, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="--engines mpi needs mpiexec on this machine's PATH") as caught:
        ip.run_line_magic("jax_cluster", "start --engines mpi -n 2")
    assert "\n" not in str(caught.value)


RANKS = """\
import os, jax
print("rank", next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")),
      "is process", jax.process_index())
"""


@pytest.fixture
def mpi_here(ip):
    """A cluster started by ``%jax_cluster start --engines mpi``: no ``--hosts``, no lab."""
    if shutil.which("mpiexec") is None:
        unavailable("the mpi test", "no mpiexec (apt-get install openmpi-bin)")
    with started_by_magic(ip, "start --engines mpi") as cluster:
        yield cluster


@pytest.mark.engines
def test_mpi_without_hosts_runs_mpiexec_on_this_machine_and_stop_leaves_nothing(mpi_here, ip, capsys):
    """``--engines mpi`` alone: ``mpiexec`` starts both ranks here (as root too, as in CI); process
    i is rank i; a collective spans them; ``stop`` leaves no rank, ``mpiexec`` or engine."""
    assert mpi_here.running and mpi_here.num_processes == 2
    launcher = next(iter(mpi_here.group.ipp.engines.values()))
    assert type(launcher).__name__ == "JaxnbMPIEngineSetLauncher"
    mpiexec = psutil.Process(launcher.pid)
    assert mpiexec.name() in ("mpiexec", "orterun", "mpirun")
    ranks = [psutil.Process(p.pid) for p in mpi_here.processes]
    assert {r.pid for r in ranks} <= {c.pid for c in mpiexec.children(recursive=True)}
    capsys.readouterr()
    ip.run_cell_magic("jax_cluster", "", RANKS + PSUM)
    out = capsys.readouterr().out
    assert "rank 0 is process 0" in out and "rank 1 is process 1" in out, out
    assert "psum 3.0 on 2 processes" in out, out
    controller = ipp_internals.controller_process(mpi_here.group.ipp)
    assert controller is not None
    ip.run_line_magic("jax_cluster", "stop")

    def left() -> list:  # this cluster's processes (other tests' clusters may be running)
        return [p for p in (mpiexec, *ranks, controller) if not processes.has_exited(p)]

    wait_until(lambda: not left(), 10, "mpiexec, its ranks and the controller to be gone")
