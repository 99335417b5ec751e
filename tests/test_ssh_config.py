"""``--hosts`` with an ssh-config alias: resolved through ``ssh -G`` (real ssh, a temp config)."""

from __future__ import annotations

import pytest

from jaxnb._core.options import ClusterOptions
from jaxnb._hosts import site
from jaxnb._hosts.ssh_config import SshHost, parse_dump, resolve

CONFIG = """\
Host gpu1
    HostName 127.0.0.1
    User alice
    Port 2222
"""


@pytest.fixture
def ssh_config(tmp_path, monkeypatch):
    path = tmp_path / "ssh_config"
    path.write_text(CONFIG)
    monkeypatch.setenv("JAXNB_SSH_CONFIG", str(path))
    return str(path)


def test_an_alias_resolves_to_its_hostname_user_and_port(ssh_config):
    assert resolve("gpu1") == SshHost("127.0.0.1", "alice", 2222)
    assert resolve("127.0.0.1").hostname == "127.0.0.1"


def test_hosts_given_as_an_alias_need_no_address(ssh_config):
    # Without resolving, "gpu1" does not resolve on this machine and start asks for --address.
    options = ClusterOptions(hosts=("gpu1",))
    assert site.for_options(options).controller_ip(options) == "127.0.0.1"


def test_the_dump_is_read_as_ssh_prints_it():
    dump = "host gpu1\nhostname 10.0.0.7\nuser bob\nport 2200\naddressfamily any\n"
    assert parse_dump(dump, "gpu1") == SshHost("10.0.0.7", "bob", 2200)
    assert parse_dump("", "gpu1") == SshHost("gpu1", None, 22)
