"""``--workdir``: the content hash, its excludes, bad input, and a local cluster started in DIR
(copies to hosts: tests/test_hosts_prep.py)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jaxnb import JaxCluster
from jaxnb._hosts import workdir


def test_hash_follows_content_not_path_and_leaves_excluded_files_out(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "m.py").write_text("x = 1\n")
    (b / "ckpt").mkdir()
    (b / "ckpt" / "w.npy").write_bytes(b"0" * 100)
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "m.pyc").write_bytes(b"junk")
    excludes = (*workdir.DEFAULT_EXCLUDES, "ckpt")
    assert workdir.tree(str(a), excludes) == workdir.tree(str(b), excludes)
    assert workdir.tree(str(a), excludes)[1:] == (1, 6)
    assert workdir.tree(str(b), ("__pycache__",))[0] != workdir.tree(str(a), ("__pycache__",))[0]
    assert workdir.tree(str(b), ("*.npy", "__pycache__")) == workdir.tree(str(a), ())
    assert workdir.tree(str(b), ("ckpt/w.npy", "__pycache__")) == workdir.tree(str(a), ())
    (a / "pkg" / "m.py").write_text("x = 2\n")
    assert workdir.tree(str(a), excludes) != workdir.tree(str(b), excludes)
    assert workdir.tree(str(tmp_path / "none"), ()) == (None, 0, 0)


def test_summary_lines():
    placed = [
        workdir.Placed("h1", "/p", "n1"),
        workdir.Placed("h2", "/c/p-h2", "n2"),
        workdir.Placed("h3", "/c/p-h3", "n3", True, 3, 10_400_000, 0.42, "rsync"),
    ]
    assert workdir.summary("/p", placed) == [
        "jaxnb: --workdir /p: already on h1 (same content)",
        "jaxnb: --workdir /p: unchanged copy on h2",
        "jaxnb: --workdir /p copied to h3:/c/p-h3 (3 files, 10.4 MB in 0.42 s, rsync)",
    ]


def test_bad_workdir_is_one_line(ip):
    for line, says in [
        ("start --workdir /no/such/folder", "--workdir /no/such/folder is not a folder on this machine"),
        ("start --workdir-exclude '*.bin'", "--workdir-exclude needs --workdir DIR"),
    ]:
        with pytest.raises(UsageError, match=says) as caught:
            ip.run_line_magic("jax_cluster", line)
        assert "\n" not in str(caught.value)


def test_exclude_patterns_from_the_magic_lose_their_quotes():
    from jaxnb.magics.accept import patterns as _patterns

    assert _patterns("'*.bin,data/raw'") == _patterns('"*.bin,data/raw"') == ["*.bin", "data/raw"]
    assert _patterns("*.ckpt") == ["*.ckpt"] and _patterns(None) == []


@pytest.mark.engines
def test_local_engines_start_in_workdir_and_import_from_it(tmp_path):
    (tmp_path / "mymodel.py").write_text("VALUE = 5\n")
    with JaxCluster(1, workdir=str(tmp_path)) as cluster:
        cluster.run(f"import os, mymodel\nassert mymodel.VALUE == 5 and os.getcwd() == {str(tmp_path)!r}")
