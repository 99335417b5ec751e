"""Every kind of site and its start and stop plan, without engines: what it configures in
ipyparallel, which launcher it picks, where the controller listens, how it orders the
processes, how many spares it keeps and how it stops. (The lab and the engine tests run the
same plans for real: tests/test_hosts.py, test_mpi.py, test_slurm.py, test_spares.py.)"""

from __future__ import annotations

import os
import shutil
import sys

import ipyparallel as ipp
import psutil
import pytest
from traitlets.config import Config

from jaxnb._core.contract import ENV_CONTROLLER_ADDRESS
from jaxnb._core.errors import StartError
from jaxnb._core.host_entries import default_address
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group
from jaxnb._hosts import mpi, site, slurm, ssh
from jaxnb._lifecycle import launch

#: One cluster of each kind. The hosts are on loopback, so the controller's address is known.
KINDS = {
    "local": ClusterOptions(n=2),
    "ssh": ClusterOptions(hosts=("127.0.0.2", "bob@127.0.0.3:2")),
    "tpu slice": ClusterOptions(hosts=("127.0.0.2", "127.0.0.3"), local_host="127.0.0.2", platform="tpu"),
    "mpi": ClusterOptions(engines="mpi"),
    "mpi on hosts": ClusterOptions(engines="mpi", hosts=("127.0.0.2", "127.0.0.3:2")),
    "slurm": ClusterOptions(engines="slurm", partition="gpu", sbatch=("--gres=gpu:8",)),
    "pbs": ClusterOptions(engines="pbs", n=4),
}
ENGINE_CMD = ["python", "-c", "engine"]
WAIT = "--IPEngine.wait_for_url_file=60"


@pytest.fixture
def folder(tmp_path):
    """The cluster's own folder."""
    return str(tmp_path)


def _configured(kind: str, folder: str) -> Config:
    """What the site of ``kind`` sets in ipyparallel's config."""
    options = KINDS[kind]
    config = Config()
    site.for_options(options).configure(config, options, ENGINE_CMD, folder)
    return config


def _control_dir(config: Config) -> str:
    """The folder made for the shared ssh connections' sockets (removed: nothing uses it)."""
    found = config.FastSSHEngineSetLauncher.get("control_dir", "")
    if found:
        shutil.rmtree(found, ignore_errors=True)
    return found


def test_each_kind_of_cluster_has_its_site():
    found = {kind: site.for_options(options) for kind, options in KINDS.items()}
    assert found == {"local": site.LOCAL, "ssh": site.SSH, "tpu slice": site.SSH, "mpi": site.MPI,
                     "mpi on hosts": site.MPI, "slurm": site.SLURM, "pbs": site.LAUNCHER}
    assert site.of(Group(KINDS["mpi"])) is site.MPI
    given = site.Site()
    group = Group(KINDS["local"])
    group.site = given
    assert site.of(group) is given


def test_each_site_picks_its_launcher_and_says_how_the_engines_find_the_controller():
    launchers = {kind: site.for_options(o).launcher(o) for kind, o in KINDS.items()}
    assert launchers == {
        "local": "local", "ssh": ssh.FastSSHEngineSetLauncher, "tpu slice": ssh.FastSSHEngineSetLauncher,
        "mpi": mpi.JaxnbMPIEngineSetLauncher, "mpi on hosts": mpi.JaxnbMPIEngineSetLauncher,
        "slurm": slurm.JaxnbSlurmEngineSetLauncher, "pbs": "pbs",
    }
    addresses = {kind: site.for_options(o).controller_ip(o) for kind, o in KINDS.items()}
    anywhere = default_address()  # the launcher picks the nodes: the interface with the default route
    assert addresses == {"local": "127.0.0.1", "ssh": "127.0.0.1", "tpu slice": "127.0.0.1",
                         "mpi": anywhere, "mpi on hosts": "127.0.0.1", "slurm": anywhere, "pbs": anywhere}
    # Only the batch launchers' engines get the connection info in their environment: local
    # engines read the controller's file, ssh engines get it sent to their hosts.
    sent = {kind for kind, o in KINDS.items() if site.for_options(o).sends_connection_env}
    assert sent == {"mpi", "mpi on hosts", "slurm", "pbs"}
    told = {kind for kind, o in KINDS.items() if ENV_CONTROLLER_ADDRESS in site.for_options(o).engine_env(o)}
    assert told == set(KINDS) - {"local"}


def test_each_site_adds_its_engine_flags():
    flags = {kind: site.for_options(o).engine_flags(o) for kind, o in KINDS.items()}
    assert flags == {"local": ["--IPEngine.enable_nanny=False", WAIT], "ssh": [WAIT], "tpu slice": [WAIT],
                     "mpi": [], "mpi on hosts": [WAIT], "slurm": [], "pbs": []}


def test_ssh_hosts_get_jaxnbs_ssh_settings_and_a_tpu_slice_its_local_worker(folder):
    config = _configured("ssh", folder)
    assert os.path.basename(_control_dir(config)).startswith("jaxnb-ssh-")
    assert dict(config.SSHEngineSetLauncher.engines) == {"127.0.0.2": 1, "bob@127.0.0.3": 2}
    assert config.FastSSHEngineSetLauncher.engine_cmd == ssh.reporting_exit(ENGINE_CMD)
    assert "ControlMaster=auto" in config.SSHLauncher.ssh_args
    assert "local_targets" not in config.FastSSHEngineSetLauncher
    tpu = _configured("tpu slice", folder)
    _control_dir(tpu)
    assert tpu.FastSSHEngineSetLauncher.local_targets == ["127.0.0.2"]
    for kind in ("local", "mpi", "slurm", "pbs"):  # no hosts: no ssh settings
        assert "SSHEngineSetLauncher" not in _configured(kind, folder), kind


def test_mpi_without_hosts_runs_mpiexec_here_and_with_hosts_reaches_them_over_jaxnbs_ssh(folder):
    here = _configured("mpi", folder).JaxnbMPIEngineSetLauncher.mpi_args
    assert "--host" not in here and "plm_rsh_agent" not in here
    if mpi.is_openmpi():  # as root (CI), OpenMPI refuses to run without it
        assert ("--allow-run-as-root" in here) == (os.geteuid() == 0)
    config = _configured("mpi on hosts", folder)
    control = _control_dir(config)
    args = config.JaxnbMPIEngineSetLauncher.mpi_args
    assert args[:2] == ["--host", "127.0.0.2:1,127.0.0.3:2"]
    assert dict(config.SSHEngineSetLauncher.engines) == {"127.0.0.2": 1, "127.0.0.3": 2}
    if mpi.is_openmpi():
        assert f"ControlPath={control}/%C" in args[args.index("plm_rsh_agent") + 1]


def test_slurm_gets_its_job_script_in_the_clusters_folder(folder):
    config = _configured("slurm", folder)
    script = config.JaxnbSlurmEngineSetLauncher.batch_template
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --gres=gpu:8\n" in script
    assert config.JaxnbSlurmEngineSetLauncher.batch_file_name == os.path.join(folder, "jaxnb-engines.sbatch")
    assert site.SLURM.pending_note(ipp.Cluster(load_profile=False)) == ""  # no job: nothing to say


def test_without_hosts_nothing_is_checked_before_the_controller_starts():
    for kind in ("local", "mpi", "slurm", "pbs"):
        options = KINDS[kind]
        assert site.for_options(options).check_hosts(None, options, {}) is None, kind


def test_each_site_orders_its_processes():
    asked = {kind: site.for_options(o).order_by for kind, o in KINDS.items()}
    assert asked["local"] is None  # the controller's order
    assert asked["ssh"].target == asked["tpu slice"].target == "jaxnb._engine.group.process:pids"
    batch = {asked[k].target for k in ("mpi", "mpi on hosts", "slurm", "pbs")}
    assert batch == {"jaxnb._engine.group.rank:launcher_rank"}
    group = Group(KINDS["mpi"])
    assert site.MPI.order(group, [7, 8, 9], [2, 0, 1]) == [8, 9, 7]  # process i is rank i
    assert site.MPI.order(group, [7, 8, 9], [2, None, 1]) is None  # an engine without a rank


def test_a_local_clusters_coordinator_listens_on_loopback():
    address = site.LOCAL.coordinator_address(Group(KINDS["local"]), 0)  # no engine asked
    host, port = address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0


def test_local_and_ssh_sites_keep_spares_batch_launchers_none():
    spares = {kind: site.for_options(o).spares(o) for kind, o in KINDS.items()}
    assert spares == {"local": 2, "ssh": 3, "tpu slice": 2, "mpi": 0, "mpi on hosts": 0, "slurm": 0, "pbs": 0}
    assert site.SSH.spares(ClusterOptions(hosts=("127.0.0.2",), spares=0)) == 0
    assert site.LOCAL.spares(ClusterOptions(n=4, spares=1)) == 1
    assert site.MPI.spares(ClusterOptions(engines="mpi", spares=2)) == 0


def test_each_site_stops_its_way():
    # Batch launchers' engines leave jax.distributed before their launcher stops them (mpi
    # with --hosts too); jaxnb SIGKILLs local engines and those on ssh hosts without goodbyes.
    leave = {kind for kind, o in KINDS.items() if site.for_options(o).leaves_group_on_stop}
    assert leave == {"mpi", "mpi on hosts", "slurm", "pbs"}
    me = psutil.Process()
    assert site.LOCAL.stop_engines(None, [me, None, psutil.Process()]) == [me]  # SIGKILLed here, once
    unstarted = ipp.Cluster(load_profile=False)
    assert site.MPI.stop_engines(unstarted, [me]) == []  # its launcher ends them, not a kill here


def test_only_this_machine_and_ssh_hosts_can_cut_collectives_and_only_here_are_processes_read():
    can = {kind for kind, o in KINDS.items() if site.for_options(o).can_cut(Group(o))}
    assert can == ({"local", "ssh", "tpu slice"} if hasattr(os, "pidfd_open") else set())
    assert {kind for kind, o in KINDS.items() if site.for_options(o).inspects_processes} == {"local"}


def test_building_the_cluster_of_mpi_without_hosts_uses_its_site(folder):
    if mpi.missing():
        pytest.skip(mpi.missing())
    options = KINDS["mpi"]
    cluster = launch.build_cluster(options, site.for_options(options), folder)
    assert cluster.engine_launcher_class is mpi.JaxnbMPIEngineSetLauncher
    assert cluster.send_engines_connection_env and cluster.controller_ip == default_address()
    command = cluster.config.EngineLauncher.engine_cmd
    assert command[:2] == [sys.executable, "-c"] and len(command) == 3  # mpiexec's engines: no flags


def test_a_launcher_that_is_not_installed_is_one_line_before_anything_is_built(folder, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    for kind, command in (("mpi", "mpiexec"), ("slurm", "sbatch")):
        with pytest.raises(StartError, match=f"needs {command} on this machine's PATH"):
            launch.build_cluster(KINDS[kind], site.for_options(KINDS[kind]), folder)
