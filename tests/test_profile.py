"""%%jax_profile on real engines: the shared 2-process cluster traces a cell together."""

from __future__ import annotations

import glob
import gzip
import json
import os

import pytest
from IPython.core.error import UsageError
from profile_cells import RAISES_CELL, STEPS_CELL

from jaxnb import RemoteError


def test_every_process_traces_into_one_run_folder(cluster, tmp_path):
    result = cluster.profile(STEPS_CELL.format(steps=3, slow=-1), name="run", storage=str(tmp_path))
    assert result.path == str(tmp_path / "run")
    files = sorted(os.path.basename(f) for f in
                   glob.glob(str(tmp_path / "run" / "plugins" / "profile" / "*" / "*.xplane.pb")))
    hosts = [result.hosts[p] for p in (0, 1)]
    assert files == sorted(f"{h}_p{p}.xplane.pb" for p, h in enumerate(hosts))
    assert sorted((r["process"], r["step"]) for r in result.steps) == [
        (p, s) for p in (0, 1) for s in range(3)]
    with gzip.open(result.perfetto, "rt") as f:
        merged = json.load(f)
    groups = {e["pid"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert groups == {1, 2}
    # Both processes read one clock (one host): the true offset is 0, so the measured offset
    # must lie within the error bound the result claims, however loaded the machine (what the
    # bound is on this machine is measured by bench/profile.py, not asserted here).
    assert set(result.clock_error_ms) == {0, 1} and result.clock_error_ms[1] > 0
    assert abs(result.clock_offsets_ms[1]) <= result.clock_error_ms[1], (
        result.clock_offsets_ms, result.clock_error_ms)
    # nothing left behind on the engines: the next profile starts cleanly
    again = cluster.profile("x = 1", name="run", storage=str(tmp_path))
    assert again.session != result.session and len(again.steps) == 2


def test_xprof_reads_the_run_folder(cluster, tmp_path):
    xprof = pytest.importorskip("xprof.convert.raw_to_tool_data")  # the `test` extra installs it
    from xprof import profile_plugin

    result = cluster.profile(STEPS_CELL.format(steps=2, slow=-1), name="x", storage=str(tmp_path))
    paths = sorted(result.files.values())
    names = [os.path.basename(p) for p in paths]
    hosts = profile_plugin.hosts_from_xplane_filenames(names, "trace_viewer@")
    assert [h for h in hosts if h.endswith(("_p0", "_p1"))] == [n.removesuffix(".xplane.pb") for n in names]
    assert "trace_viewer@" in xprof.xspace_to_tool_names(paths)
    data, content_type = xprof.xspace_to_tool_data(paths, "overview_page", {})
    assert content_type == "application/json" and json.loads(data)
    # XProf's multi-host trace viewer: every process is a host of the one session
    hosts = [n.removesuffix(".xplane.pb") for n in names]
    data, _ = xprof.xspace_to_tool_data(paths, "trace_viewer@", {"trace_viewer_options": {},
                                                                "hosts": hosts})
    shown = {e["args"]["name"].split()[0] for e in json.loads(data)["traceEvents"]
             if e.get("name") == "process_name"}
    assert shown == set(hosts)


def test_a_cell_that_raises_keeps_its_trace(cluster, tmp_path):
    kept = []
    with pytest.raises(RemoteError, match="boom after 2 steps"):
        cluster.profile(RAISES_CELL, name="err", storage=str(tmp_path), on_result=kept.append)
    (result,) = kept
    assert isinstance(result.error, RemoteError)
    assert sorted((r["process"], r["step"]) for r in result.steps) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(os.path.getsize(f) > 0 for f in result.files.values()) and len(result.files) == 2
    cluster.run("assert 1 + 1 == 2")  # the cluster goes on


def test_storage_that_cannot_be_written_is_one_line(shared_magics, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError) as err:
        shared_magics.run_cell_magic("jax_profile", f"--storage {blocker}", "x = 1")
    assert "pass --storage DIR" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UsageError, match="-o takes a Python name"):
        shared_magics.run_cell_magic("jax_profile", "-o 1x", "x = 1")


@pytest.mark.parametrize(("cell", "flags"), [
    ("%%jax_profile?", ["--name", "--storage", "-o", "StepTraceAnnotation", "xprof --logdir"]),
    ("%jax_train?", ["--profile-steps"]),
])
def test_help_lists_every_flag(ip, cell, flags):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        ip.run_cell(cell)
    assert all(flag in captured.stdout for flag in flags), captured.stdout


@pytest.mark.engines
def test_a_process_that_dies_is_reported_and_nothing_hangs(tmp_path):
    """A death mid-cell: the cell's ProcessFailure is raised, the result says no trace came back."""
    from jaxnb import JaxCluster, ProcessFailure

    dies = (
        "import os, signal, jax, jax.numpy as jnp\n"
        "from jax.experimental import multihost_utils\n"
        "for i in range(3):\n"
        "    with jax.profiler.StepTraceAnnotation('train', step_num=i):\n"
        "        if jax.process_index() == 1 and i == 2:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        multihost_utils.process_allgather(jnp.ones(1))\n"
    )
    kept = []
    with JaxCluster(n=2) as doomed, pytest.raises(ProcessFailure, match=r"\[p1\].*SIGKILL"):
        doomed.profile(dies, storage=str(tmp_path), on_result=kept.append)
    (result,) = kept
    assert isinstance(result.error, ProcessFailure)
    assert 1 in result.missing and "died" in result.missing[1]


def test_a_trace_already_running_is_one_line(shared_magics, cluster, tmp_path):
    cluster.run(f"import jax\njax.profiler.start_trace({str(tmp_path / 'mine')!r})")
    try:
        with pytest.raises(UsageError) as err:
            shared_magics.run_cell_magic("jax_profile", f"--storage {tmp_path}", "x = 1")
        assert "could not start tracing together" in str(err.value) and "\n" not in str(err.value)
        assert "already been started" in str(err.value)
    finally:
        cluster.run("jax.profiler.stop_trace()")
    assert len(cluster.profile("x = 2", storage=str(tmp_path)).hosts) == 2
