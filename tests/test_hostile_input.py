"""Hostile input never becomes an option or a command: host entries (``--hosts``, a hostfile,
TPU metadata), Slurm option values and environment names are refused in one line, and every
ssh jaxnb runs ends its options with ``--`` before the destination (real ``ssh``, no host)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from jaxnb import JaxCluster
from jaxnb._core import spelling
from jaxnb._core.host_entries import HostEntry, HostError, parse_entry, parse_hostfile_text
from jaxnb._core.options import OptionError
from jaxnb._hosts import slurm, ssh, ssh_connections, tpu

#: Host entries that would be options of ssh, rsync or mpiexec, or more than one shell word.
HOSTILE_HOSTS = [
    "-oProxyCommand=touch${IFS}/tmp/x",
    "-oProxyCommand=sh",
    "alice@-oProxyCommand=sh",
    "-lroot@node1",
    "-F/tmp/config",
    "node1;touch${IFS}/tmp/x",
    "node$(touch${IFS}/tmp/x)",
    "node`id`",
    "node1\n-oProxyCommand=sh",
    "node1 -oProxyCommand=sh",
    ".node",
    "node'1",
    "[-oProxyCommand=sh]:2",
]


@pytest.mark.parametrize("text", HOSTILE_HOSTS)
def test_a_hostile_host_entry_is_refused_in_one_line(text):
    with pytest.raises(HostError) as err:
        parse_entry(text)
    assert "\n" not in str(err.value) and str(err.value).endswith(("e.g. node1:2", "e.g. alice@node1"))


def test_a_hostile_hostfile_line_is_refused_naming_it(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:2\n-oProxyCommand=touch${IFS}/tmp/x  # planted\n")
    with pytest.raises(HostError) as err:
        parse_hostfile_text(hostfile.read_text())
    assert str(err.value).startswith("bad host in entry '-oProxyCommand=touch${IFS}/tmp/x': a host "
                                     "is a name (letters, digits, '.', '-' and '_', not starting "
                                     "with '-' or '.') or an IP address")
    with pytest.raises(OptionError):  # the Python API refuses it before anything starts
        JaxCluster(hostfile=str(hostfile))
    with pytest.raises(OptionError):
        JaxCluster(hosts=["node1", "-oProxyCommand=sh"])


def test_a_hostfile_goes_with_address_and_python(tmp_path):
    """The hostfile names the hosts: --address and --python are for them, as with --hosts."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:2\n")
    options = JaxCluster(hostfile=str(hostfile), address="10.0.0.5", python="/opt/py").options
    assert options.hosts == ("node1:2",) and options.address == "10.0.0.5"


@pytest.mark.parametrize("text", ["node1", "alice@node1:2", "gpu_box.lab-3:8", "10.0.0.5:2",
                                  "[fe80::1]:2", "bob@[::1]", "fe80::1%eth0"])
def test_names_and_addresses_still_pass_and_print_back_the_same(text):
    entry = parse_entry(text)
    assert parse_entry(str(entry)) == entry and entry.explicit == parse_entry(str(entry)).explicit


def test_an_ipv6_entry_keeps_its_count_through_the_options():
    assert JaxCluster(hosts=["[fe80::1]:2"], n=2).options.hosts == ("[fe80::1]:2",)


@pytest.mark.parametrize("env", [
    {"TPU_WORKER_HOSTNAMES": "10.0.0.1,-oProxyCommand=sh", "TPU_WORKER_ID": "0"},
    {"TPU_WORKER_HOSTNAMES": "w0,w1;touch${IFS}/tmp/x", "TPU_WORKER_ID": "0"},
])
def test_hostile_tpu_worker_names_are_refused(env):
    with pytest.raises(tpu.SliceError) as err:
        tpu.discover(env, ask_metadata=False)
    assert str(err.value).startswith("TPU_WORKER_HOSTNAMES names ") and "\n" not in str(err.value)


def test_hostile_tpu_metadata_endpoints_are_refused(monkeypatch):
    endpoints = "w0:0:10.0.0.1,w1:1:-oProxyCommand=sh"
    monkeypatch.setattr(tpu, "metadata", lambda key: endpoints if key == "worker-network-endpoints"
                        else None)
    with pytest.raises(tpu.SliceError) as err:
        tpu.discover({"TPU_WORKER_ID": "0"})
    assert str(err.value) == ("the TPU metadata's worker-network-endpoints names '-oProxyCommand=sh', "
                              "which is not a host name or an IP address; fix it or pass --hosts")


# ---- Slurm option values and environment names ---------------------------------------------------


@pytest.mark.parametrize(("keyword", "value", "python", "magic"), [
    ("partition", "gpu\n#SBATCH --uid=0", "partition='gpu\\n#SBATCH --uid=0' is not a partition name",
     "--partition 'gpu\\n#SBATCH --uid=0' is not a partition name"),
    ("partition", "gpu --uid=0", "partition='gpu --uid=0' is not", "--partition 'gpu --uid=0' is not"),
    ("account", "-A", "account='-A' is not an account name", "--account '-A' is not an account name"),
    ("account", "proj\rx", "account='proj\\rx' is not", "--account 'proj\\rx' is not"),
    ("time_limit", "1:00:00\ntouch /tmp/x", "time_limit='1:00:00\\ntouch /tmp/x' is not a Slurm time",
     "--time-limit '1:00:00\\ntouch /tmp/x' is not a Slurm time"),
    ("time_limit", "1h", "time_limit='1h' is not a Slurm time", "--time-limit '1h' is not"),
    ("sbatch", ["--gres=gpu:8", "--mem=1G\ntouch /tmp/x"],
     "sbatch='--mem=1G\\ntouch /tmp/x' is not an sbatch option on one line; e.g. sbatch='--gres=gpu:8'",
     "--sbatch '--mem=1G\\ntouch /tmp/x' is not an sbatch option on one line; e.g. --sbatch=--gres=gpu:8"),
    ("sbatch", ["nodes=2"], "sbatch='nodes=2' is not an sbatch option", "--sbatch 'nodes=2' is not"),
    ("sbatch", ["--comment=a\x00b"], "sbatch='--comment=a\\x00b' is not", "--sbatch '--comment=a\\x00b'"),
])
def test_slurm_values_that_would_break_the_job_script_are_refused(keyword, value, python, magic):
    with pytest.raises(OptionError) as from_python:
        JaxCluster(engines="slurm", **{keyword: value})
    assert str(from_python.value).startswith(python) and "\n" not in str(from_python.value)
    with spelling.as_flags(), pytest.raises(OptionError) as from_magic:
        JaxCluster(engines="slurm", **{keyword: value})
    assert str(from_magic.value).startswith(magic) and "\n" not in str(from_magic.value)


def test_the_magic_refuses_a_hostile_slurm_value_in_one_line(ip):
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("jax_cluster", "start --engines slurm -n 2 --partition lab;id")
    assert str(caught.value) == ("--partition 'lab;id' is not a partition name (letters, "
                                 "digits, '_', '.', '-'; several separated by commas); e.g. "
                                 "--partition gpu")


def test_slurm_values_users_write_still_pass():
    options = JaxCluster(engines="slurm", partition="gpu,debug", account="proj_42.a",
                         time_limit="2-12:00:00", sbatch=["--gres=gpu:8", '--constraint="a|b" --exclusive',
                                                          "--comment={run}"]).options
    assert options.partition == "gpu,debug"
    for limit in ("30", "1:00:00", "2-12", "UNLIMITED", "infinite"):
        assert JaxCluster(engines="slurm", time_limit=limit).options.time_limit == limit


@pytest.mark.parametrize("name", ["A,B", "X\nY", "1X", "A=B", ""])
def test_an_environment_name_that_is_not_one_is_refused(name):
    with pytest.raises(OptionError) as err:
        JaxCluster(env={name: "1"})
    assert str(err.value).startswith(f"env= names {name!r}, which is not an environment variable name")


def test_a_slurm_job_exports_the_engines_variables_and_a_logins_basics_only():
    engine_env = {"IPP_CONNECTION_INFO": "{}", "JAX_PLATFORMS": "cpu", "WANDB_MODE": "offline"}
    kernel_env = {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C", "AWS_SECRET_ACCESS_KEY": "k",
                  "GITHUB_TOKEN": "t", "HF_TOKEN": "t", "SSH_AUTH_SOCK": "/tmp/agent"}
    assert slurm.exported(engine_env, kernel_env) == [
        "HOME", "IPP_CONNECTION_INFO", "JAX_PLATFORMS", "LC_ALL", "PATH", "WANDB_MODE"]
    script = slurm.batch_template()
    assert "#SBATCH --export={exported}" in script.splitlines() and "ALL" not in script


# ---- every ssh ends its options before the destination ---------------------------------------


@pytest.fixture
def marker(tmp_path):
    """A file that exists only if a planted ProxyCommand ran."""
    return tmp_path / "proxy-command-ran"


def _proxy(marker: Path) -> str:
    return f"-oProxyCommand=touch${{IFS}}{marker}"


def test_ssh_never_takes_a_destination_as_an_option(marker, tmp_path):
    """Even a hostile name that got past the checks (built here by hand) stays a destination:
    the host check, the probes, closing connections and ipyparallel's own ssh commands."""
    target = _proxy(marker)
    control = str(tmp_path / "ssh")
    os.makedirs(control)
    with pytest.raises(ssh_connections.StartError):
        ssh_connections.check_hosts((HostEntry(target),), sys.executable, {}, control, "log", 10)
    assert ssh_connections.probe(target, 1, control, timeout=2)[1] is False
    assert ssh_connections.wait_answering([target], control, 2) == [target]
    ssh_connections.close_connections(control, [target])
    launcher = ssh.FastSSHEngineLauncher(hostname=target, ssh_args=ssh_connections.ssh_options(control))
    with pytest.raises(Exception, match="remote shell information"):
        launcher.ssh_sender  # noqa: B018 - its first ssh command
    assert not marker.exists()


def test_the_interpreter_path_stays_one_word_in_the_remote_shell(tmp_path):
    """``--python`` reaches a remote shell as ipyparallel's interpreter: quoted, its shell
    characters are part of the path (here a local ``sh -c`` stands for the remote shell)."""
    from traitlets.config import Config

    from jaxnb._core.options import ClusterOptions
    from jaxnb._hosts import remote_start

    marker = tmp_path / "ran"
    python = f"/opt/py;touch {marker};/bin/python"
    config = Config()
    remote_start.configure(config, ClusterOptions(hosts=("node1",), python=python), ["engine"])
    os.rmdir(config.FastSSHEngineSetLauncher.control_dir)  # made for the connections: none here
    word = config.SSHLauncher.remote_python
    subprocess.run(["sh", "-c", f"{word} --version"], capture_output=True, check=False)
    assert shlex.split(word) == [python] and not marker.exists()
    assert config.SSHLauncher.scp_args[-1] == "--"
