"""Host entries, hostfiles and routing-table addresses (pure helpers, no cluster)."""

from __future__ import annotations

import pytest

from jaxnb._core.host_entries import (
    HostEntry,
    HostError,
    check_address,
    controller_address,
    default_address,
    engine_counts,
    parse_entry,
    parse_hostfile_text,
    parse_hosts,
    read_hostfile,
    route_address,
)


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("node1", HostEntry("node1")),
        (" alice@node1:2 ", HostEntry("node1", "alice", 2)),
        ("10.0.0.5:3", HostEntry("10.0.0.5", None, 3)),
        ("[fe80::1]:2", HostEntry("fe80::1", None, 2)),
        ("bob@[::1]", HostEntry("::1", "bob", 1)),
        ("fe80::1", HostEntry("fe80::1")),
    ],
)
def test_entries(text, entry):
    assert parse_entry(text) == entry


@pytest.mark.parametrize("text", ["", "@node", "node:0", "node:x", "node:-1", "[::1", "[::1]x", "a b"])
def test_bad_entries_say_how_to_write_them(text):
    with pytest.raises(HostError) as err:
        parse_entry(text)
    assert "\n" not in str(err.value)


def test_hosts_and_hostfile(tmp_path):
    assert parse_hosts("a, b:2,,root@c") == (HostEntry("a"), HostEntry("b", None, 2), HostEntry("c", "root"))
    text = "# lab\nnode1:2\n\nalice@node2  # second\n"
    assert parse_hostfile_text(text) == (HostEntry("node1", None, 2), HostEntry("node2", "alice"))
    path = tmp_path / "hosts"
    path.write_text(text)
    assert read_hostfile(str(path)) == parse_hostfile_text(text)
    with pytest.raises(HostError, match="cannot read hostfile="):
        read_hostfile(str(tmp_path / "missing"))
    with pytest.raises(HostError, match="names no host"):
        parse_hostfile_text("# nothing\n")
    with pytest.raises(HostError, match="names no host"):
        parse_hosts(" , ")


def test_engine_counts_add_up_per_target():
    entries = parse_hosts("a:2,root@a,a")
    assert engine_counts(entries) == {"a": 3, "root@a": 1}
    assert str(entries[0]) == "a:2" and str(entries[1]) == "root@a"


def test_route_address_comes_from_the_routing_table():
    assert route_address("127.0.0.1") == "127.0.0.1"
    assert route_address("127.0.0.2") == "127.0.0.1"  # lo routes all of 127/8 from 127.0.0.1
    assert controller_address(parse_hosts("127.0.0.1,127.0.0.3:2")) == "127.0.0.1"
    with pytest.raises(HostError, match="--address"):
        route_address("no-such-host.invalid")


def test_default_address_is_an_interface_address():
    import ipaddress

    address = ipaddress.ip_address(default_address())
    assert not address.is_unspecified
    assert route_address(str(address)) == str(address)  # one of this machine's own


def test_check_address():
    assert check_address("10.0.0.5") == "10.0.0.5"
    for bad in ("0.0.0.0", "::", "node1"):
        with pytest.raises(HostError, match="address="):
            check_address(bad)


def test_the_shell_around_a_remote_engine_reports_its_exit():
    import subprocess
    import sys

    from jaxnb._hosts.ssh import exit_status, reporting_exit

    for code, how in [("import os; os.kill(os.getpid(), 9)", "was killed by SIGKILL"),
                      ("raise SystemExit(3)", "exited with status 3")]:
        out = subprocess.run([*reporting_exit([sys.executable, "-c", code]), "--an-engine-arg"],
                             capture_output=True, text=True, timeout=30)
        assert exit_status("log line\n" + out.stderr) == how
    assert exit_status("no shell line here") is None


def test_a_launcher_that_started_nothing_has_no_pid_to_kill():
    from types import SimpleNamespace

    from jaxnb._hosts.ssh import started_pid

    # ipyparallel's launchers say -1 before (or without) a start: `kill -9 -1` kills everything.
    for pid in (-1, 0, 1, None, "12"):
        assert started_pid(SimpleNamespace(pid=pid)) is None
    assert started_pid(SimpleNamespace()) is None
    assert started_pid(SimpleNamespace(pid=4242)) == 4242
