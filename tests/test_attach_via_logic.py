"""``attach NAME --via [user@]host``: what is checked before anything reaches ssh (milliseconds)."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from jaxnb._core.host_entries import HostError
from jaxnb._hosts import attach_via


@pytest.mark.parametrize("text, target", [
    ("login1", "login1"), ("alice@login1", "alice@login1"), ("10.0.0.5", "10.0.0.5"),
    ("a.b-c_d", "a.b-c_d"),
])
def test_a_host_or_user_at_host_is_taken(text, target):
    assert attach_via.check_via(text).target == target


@pytest.mark.parametrize("text, said", [
    ("-oProxyCommand=x", "bad host"), ("login1 -v", "bad host"), ("a;b", "bad host"),
    ("@login1", "empty user"), ("-l@login1", "not a user name"), ("login1:2", "--via takes [user@]host"),
    ("fe80::1", "--via takes [user@]host"), ("", "empty host entry"),
])
def test_anything_that_could_become_an_ssh_option_or_a_second_word_is_one_line(text, said):
    with pytest.raises(HostError, match=re.escape(said)) as caught:
        attach_via.check_via(text)
    assert len(str(caught.value).splitlines()) == 1


def test_a_wrong_name_or_interpreter_is_refused_before_ssh():
    with pytest.raises(ValueError, match="cluster name"):
        attach_via.attach("-x", "login1", "/usr/bin/python3")
    with pytest.raises(ValueError, match="--python takes"):
        attach_via.attach("exp1", "login1", "")


def test_the_ssh_socket_folder_is_private_and_plain(monkeypatch, tmp_path):
    spaced = tmp_path / "a b"
    spaced.mkdir()
    monkeypatch.setenv("TMPDIR", str(spaced))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    folder = attach_via._private_folder()
    try:
        assert folder.startswith("/tmp/jaxnb-via-")  # ipyparallel puts it on ssh's line unquoted
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    finally:
        os.rmdir(folder)


def test_empty_folders_of_killed_kernels_are_removed_and_live_ones_kept(tmp_path):
    old, new, live = (tmp_path / f"jaxnb-via-{n}" for n in ("old", "new", "live"))
    for folder in (old, new, live):
        folder.mkdir()
    (live / "ssh").write_text("")  # a connection's socket
    for folder in (old, live):
        os.utime(folder, (0, 0))
    attach_via._remove_stale(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jaxnb-via-live", "jaxnb-via-new"]


def test_a_remote_listing_is_refused_before_ssh_and_keeps_only_rows_a_listing_has():
    import jaxnb
    from jaxnb._hosts import remote_list

    with pytest.raises(HostError, match="bad host"):
        jaxnb.clusters(via="-oProxyCommand=x")
    with pytest.raises(ValueError, match="--python takes"):
        jaxnb.clusters(via="login1", python="a\nb")
    with pytest.raises(ValueError, match="python= goes with via="):
        jaxnb.clusters(python="/usr/bin/python3")
    good = {"name": "exp1", "processes": 2, "hosts": ["login1"], "attached": None, "idle_since": 5.0,
            "idle_timeout": None,
            "runs": [{"name": "mlp", "kind": "run", "state": "running", "folder": "/r"}]}
    bad = [{**good, "processes": "2"}, {**good, "hosts": "login1"}, {**good, "runs": [{"name": 1}]},
           {**good, "attached": "pid"}, ["exp1"], "exp1"]
    assert remote_list._rows("Welcome to login1\n" + json.dumps([good, *bad])) == [good]
    assert remote_list._rows("not json") is None and remote_list._rows('{"name": "x"}') is None
    assert remote_list._rows("") is None


@pytest.mark.parametrize("line, noted", [
    ('{"run": "mlp", "folder": "/scratch/runs/mlp", "kind": "run"}', ("mlp", "/scratch/runs/mlp", "run")),
    ('{"run": "s", "folder": "/r/s", "kind": "search"}', ("s", "/r/s", "search")),
    ('{"run": "mlp", "folder": "runs/mlp", "kind": "run"}', None),  # not an absolute folder
    ('{"run": "mlp\\nfar  2", "folder": "/r/mlp", "kind": "run"}', None),  # not the folder's name
    ('{"run": "mlp", "folder": "/r/mlp", "kind": "exec"}', None),
    ('{"run": 1, "folder": "/r/mlp", "kind": "run"}', None),
    ('["run", "mlp"]', None),
    ("detach-ish", None),
    ("", None),
])
def test_the_hold_notes_only_a_well_formed_run_line(line, noted):
    from jaxnb._attach import hold

    assert hold._run_noted(line) == noted


@pytest.mark.parametrize("what, said", [
    ("--break-lock", "runs started from this kernel take no lock in login1's run folders"),
    ("--max-failures", "do it in a kernel on login1 (`%jax_cluster attach exp1` there)"),
    ("restart", "do it in a kernel on login1"),
])
def test_what_needs_the_host_is_refused_in_one_line_saying_what_to_do(what, said):
    hold = attach_via.RemoteHold("exp1", attach_via.check_via("login1"), "python3")
    try:
        text = str(hold.refuse(what))
    finally:
        hold.close()
    assert text.startswith(f"`{what}` does not work through `--via`") and said in text, text
    assert len(text.splitlines()) == 1
