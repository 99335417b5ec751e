"""Hostile host entries and interpreter paths on the ssh lab (real sshd in network namespaces):
a hostfile line or a host named like an ssh option is refused before any ssh runs, and an
interpreter path with shell characters stays one word in the hosts' shells. The planted
commands never run. Skipped (with the reason) where the lab cannot be built."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import uuid
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from jaxnb import JaxCluster
from jaxnb.magics import current_cluster, use_cluster

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def lab(make_lab):
    return make_lab(1)


@pytest.fixture
def ssh_log(tmp_path, monkeypatch):
    """Every ssh that this process (and what it starts) runs, logged by an ``ssh`` first on
    PATH that then runs the real one."""
    shim, log = tmp_path / "bin", tmp_path / "ssh.log"
    shim.mkdir()
    (shim / "ssh").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("ssh")} "$@"\n')
    (shim / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_hostile_hostfile_line_is_refused_before_any_ssh_runs(lab, ip, ssh_log, tmp_path):
    marker = tmp_path / "proxy-command-ran"
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{lab.addresses[0]}\n-oProxyCommand=touch${{IFS}}{marker}\n")
    previous = current_cluster(ip)
    try:
        with pytest.raises(UsageError) as err:
            ip.run_line_magic("jax_cluster", f"start --hostfile {hostfile} --address {lab.bridge_address}")
        assert current_cluster(ip) is previous  # nothing half started
    finally:
        if current_cluster(ip) is not previous:
            current_cluster(ip).stop()
            use_cluster(previous, ip)
    said = str(err.value)
    assert said.startswith(f"bad host in entry '-oProxyCommand=touch${{IFS}}{marker}': a host is a "
                           "name") and "\n" not in said
    assert not marker.exists() and not ssh_log.exists()  # no ssh ran at all


@pytest.mark.parametrize("space", [" ", "${IFS}"])
def test_a_host_named_like_an_ssh_option_never_runs_its_command(lab, ssh_log, tmp_path, space):
    marker = tmp_path / "proxy-command-ran"
    with pytest.raises(ValueError) as err:
        JaxCluster(hosts=[lab.addresses[0], f"-oProxyCommand=touch{space}{marker}"],
                   address=lab.bridge_address).start()
    assert str(err.value).startswith("bad host in entry '-oProxyCommand=")
    assert not marker.exists() and not ssh_log.exists()


def test_an_interpreter_path_with_shell_characters_stays_one_word_on_the_hosts(lab, tmp_path):
    """``--python`` with ``;`` and spaces in its folder's name: the engines start with that
    interpreter, and the words after ``;`` never run in the hosts' shells."""
    marker = f"jaxnb-planted-{uuid.uuid4().hex[:8]}"  # what `touch` would make in the ssh session's folder
    folder = tmp_path / f"py;touch {marker};x"
    folder.mkdir()
    python, used = folder / "python", tmp_path / "interpreter-used"
    python.write_text(f'#!/bin/sh\necho "$(hostname)" >> {used}\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    with JaxCluster(hosts=[lab.addresses[0]], python=str(python), address=lab.bridge_address,
                    spares=0) as cluster:
        assert cluster.running and [p.host for p in cluster.processes] == ["labhost1"]
    assert "labhost1" in used.read_text().split()  # the engine's interpreter, run on the host
    for where in (Path.home(), Path.cwd(), folder.parent):
        assert not (where / marker).exists(), where
