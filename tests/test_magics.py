"""The magics on a real IPython shell: display, bad input, lifecycle, Kubeflow-style --no-init."""

from __future__ import annotations

import ipaddress
import os
import stat

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from support.clusters import ipyparallel_processes

from jaxnb import RemoteError
from jaxnb._core import ipp_internals
from jaxnb.magics import current_cluster, use_cluster

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("start -n 0", "-n must be at least 1"),
        ("start -n two", "-n takes a positive whole number"),
        ("launch", "unknown subcommand 'launch'"),
        ("", "needs a subcommand"),
        ("start --platform quantum", "unknown --platform 'quantum'"),
        ("start --devices-per-process 0", "--devices-per-process must be at least 1"),
        ("start --timeout -3", "--timeout must be a positive number"),
        ("start --hosts ,", "--hosts names no host"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(ip, line, message):
    before = {p.pid for p in ipyparallel_processes()}
    with pytest.raises(UsageError, match=message) as info:
        ip.run_line_magic("jax_cluster", line)
    assert "\n" not in str(info.value)
    assert {p.pid for p in ipyparallel_processes()} == before


def test_cell_before_start_says_to_start(ip):
    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        with pytest.raises(UsageError, match="%jax_cluster start"):
            ip.run_cell_magic("jax_cluster", "", "print(1)")
        with pytest.raises(UsageError, match="%jax_cluster start"):
            ip.run_line_magic("jax_pull", "x")
    finally:
        use_cluster(previous, ip)


def test_cell_output_is_ordinary_notebook_output(shared_magics):
    code = (
        "import jax\nfrom IPython.display import HTML, display\n"
        "print('shared line')\ndisplay(HTML('<b>from process 0</b>'))\njax.process_index() + 40"
    )
    with capture_output() as captured:
        value = shared_magics.run_cell_magic("jax_cluster", "", code)
    assert captured.stdout == "shared line\n"
    bundles = [o.data for o in captured.outputs]
    assert [b.get("text/html") for b in bundles if "text/html" in b] == ["<b>from process 0</b>"]
    assert value == 40  # the magic's value: IPython's Out[n]


def test_only_a_last_expression_shows_its_value(shared_magics):
    # A cell that ends in a statement runs silent on the engines: displays, streams
    # and tracebacks with their source line must be unchanged, and no value shown.
    code = "from IPython.display import display\n7 * 6\ndisplay('shown')\nprint('out')\nx = 1"
    with capture_output() as captured:
        value = shared_magics.run_cell_magic("jax_cluster", "", code)
    assert captured.stdout == "out\n" and value is None
    assert [o.data.get("text/plain") for o in captured.outputs] == ["'shown'"]
    assert shared_magics.run_cell_magic("jax_cluster", "", "x + 41") == 42
    with pytest.raises(RemoteError) as info:
        shared_magics.run_cell_magic("jax_cluster", "", "y = 2\nz = y / 0")
    assert "z = y / 0" in "\n".join(info.value.tracebacks)
    current_cluster(shared_magics).group.suspect = None


def test_status_shows_a_devices_table(shared_magics):
    with capture_output() as captured:
        shared_magics.run_line_magic("jax_cluster", "status")
    (bundle,) = [o.data for o in captured.outputs]
    html = bundle["text/html"]
    assert "2 processes, 2 global devices" in html and "p0" in html and "p1" in html
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_pull_push_and_missing_names(shared_magics):
    ip = shared_magics
    ip.user_ns["scale"] = 3
    ip.run_line_magic("jax_push", "scale")
    ip.run_cell_magic("jax_cluster", "", "import jax\nscaled = scale * 2")
    ip.run_line_magic("jax_pull", "scaled")
    assert ip.user_ns["scaled"] == 6
    with pytest.raises(UsageError, match="not defined on any process"):
        ip.run_line_magic("jax_pull", "never_defined_here")
    with pytest.raises(UsageError, match="not defined in the notebook"):
        ip.run_line_magic("jax_push", "never_defined_here")


def test_remote_error_raises_in_the_notebook(shared_magics):
    with pytest.raises(RemoteError, match=r"KeyError.*\[p0\]"):
        shared_magics.run_cell_magic(
            "jax_cluster", "", "import jax\nif jax.process_index() == 0:\n    {}['missing']"
        )
    current_cluster(shared_magics).group.suspect = None


KUBEFLOW_CELL = (
    "import os, jax\n"
    "jax.distributed.initialize(\n"
    "    coordinator_address=os.environ['JAX_COORDINATOR_ADDRESS'],\n"
    "    num_processes=int(os.environ['JAX_NUM_PROCESSES']),\n"
    "    process_id=int(os.environ['JAX_PROCESS_ID']))\n"
    "print(jax.process_count(), jax.device_count())"
)


def test_kubeflow_code_on_an_initialised_cluster(shared_magics):
    """Its own initialize() of the same group is skipped with a note; another group is refused."""
    with capture_output() as captured:
        shared_magics.run_cell_magic("jax_cluster", "", KUBEFLOW_CELL)
    assert captured.stdout == "2 2\n"
    assert captured.stderr.count("initialize() skipped") == 1 and "--no-init" in captured.stderr
    with pytest.raises(RemoteError, match=r"already initialised by jaxnb.*--no-init"):
        shared_magics.run_cell_magic(
            "jax_cluster", "", "import jax\njax.distributed.initialize(num_processes=5)")
    current_cluster(shared_magics).group.suspect = None
    with capture_output() as captured:
        shared_magics.run_cell_magic("jax_cluster", "", "print(jax.process_count())")
    assert captured.stdout == "2\n"


def test_lifecycle_no_init_restart_stop(ip):
    """Kubeflow-style code runs unchanged with --no-init; restart gives new processes; stop leaks nothing."""
    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        with capture_output():
            ip.run_line_magic("jax_cluster", "start -n 2 --no-init")
        with pytest.raises(UsageError, match="already running; use `%jax_cluster restart`"):
            ip.run_line_magic("jax_cluster", "start")
        with capture_output() as captured:
            ip.run_cell_magic("jax_cluster", "", KUBEFLOW_CELL)
        assert captured.stdout == "2 2\n"
        old_pids = {p.pid for p in current_cluster(ip).processes}
        with capture_output():
            ip.run_line_magic("jax_cluster", "restart")
        new_pids = {p.pid for p in current_cluster(ip).processes}
        assert new_pids and not (old_pids & new_pids)
        assert not any(psutil.pid_exists(pid) for pid in old_pids)
        with capture_output() as captured:
            ip.run_cell_magic("jax_cluster", "", KUBEFLOW_CELL)
        assert captured.stdout == "2 2\n"
        with capture_output():
            ip.run_line_magic("jax_cluster", "stop")
        assert not any(psutil.pid_exists(pid) for pid in new_pids)
    finally:
        if current_cluster(ip) is not None:
            current_cluster(ip).stop()
        use_cluster(previous, ip)


def test_default_start_fits_the_machine(ip):
    previous = current_cluster(ip)
    use_cluster(None, ip)
    try:
        with capture_output() as captured:
            ip.run_line_magic("jax_cluster", "start")
        assert "2 processes, 2 global devices" in captured.outputs[0].data["text/html"]
    finally:
        current_cluster(ip).stop()
        use_cluster(previous, ip)
    assert ipyparallel_processes() == [] or all(
        p.pid in {q.pid for q in _shared_cluster_pids()} for p in ipyparallel_processes()
    )


def _shared_cluster_pids() -> list[psutil.Process]:
    return [p for p in ipyparallel_processes() if p.is_running()]


def test_local_cluster_listens_on_loopback_only(cluster):
    pids = {p.pid for p in cluster.processes}
    for proc in ipyparallel_processes():
        pids.add(proc.pid)
    listening = [
        c
        for c in psutil.net_connections(kind="inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]
    assert listening, "expected the controller and coordinator to listen"
    assert all(_is_loopback(c.laddr.ip) for c in listening), listening
    assert any(c.laddr.port == int(cluster.coordinator_address.rsplit(":", 1)[1]) for c in listening)


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_key_files_are_private(cluster):
    for path in ipp_internals.key_files(cluster.group.ipp)[:2]:
        assert os.path.exists(path), path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize(
    ("magic", "line", "cell", "message"),
    [
        ("jax_cluster", "-n 4", "print(1)", "unrecognized arguments: -n 4"),
        ("jax_cluster", "--platform gpu", "print(1)", "unrecognized arguments: --platform gpu"),
        ("jax_cluster", "start", "print(1)", "unrecognized arguments: start"),
        ("jax_cluster", "--all --process 1", "print(1)", "--all and --process do not go together"),
        ("jax_cluster", "--process -1", "print(1)", "--process takes a whole number >= 0"),
        ("jax_cluster", "stop --all", None, "unrecognized arguments: --all"),
        ("jax_cluster", "status --process 1", None, "unrecognized arguments: --process 1"),
        ("jax_cluster", "stop -n 2", None, "`%jax_cluster stop` takes no flags (got -n)"),
        ("jax_cluster", "restart --platform gpu", None, "`%jax_cluster restart` takes no flags"),
        ("jax_cluster", "reset --no-init", None, "`%jax_cluster reset` takes no flags (got --no-init)"),
        ("jax_cluster", "stacks --timeout 3", None, "`%jax_cluster stacks` takes no flags"),
        ("jax_train", "train --all", None, "unrecognized arguments: --all"),
        ("jax_train", "train --steps ten", None, "--steps takes a positive whole number"),
        ("jax_train", "train --datasets train", None, "--datasets takes NAME=VAR pairs"),
        ("jax_mesh", "mesh --all", None, "%jax_mesh takes no flags (got --all)"),
        ("jax_pull", "x --process 0", None, "%jax_pull takes no flags (got --process)"),
        ("jax_push", "x y-z", None, "'y-z' is not a Python name"),
        ("jax_push", "", None, "%jax_push takes NAME"),
    ],
)
def test_stray_flags_are_one_line_usage_errors(ip, magic, line, cell, message):
    """A flag that a magic (or its mode) does not use is refused, never silently ignored."""
    before = {p.pid for p in ipyparallel_processes()}
    with pytest.raises(UsageError) as info:
        if cell is None:
            ip.run_line_magic(magic, line)
        else:
            ip.run_cell_magic(magic, line, cell)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert {p.pid for p in ipyparallel_processes()} == before


@pytest.mark.parametrize(
    ("cell", "flags"),
    [
        ("%jax_cluster?", ["-n", "--devices-per-process", "--platform", "--engines", "--hosts",
                           "--no-init", "--timeout", "--init-timeout", "start, status, stop"]),
        ("%%jax_cluster?", ["--all", "--process", "--timeout", "SPMD"]),
        ("%jax_train?", ["--config", "--name", "--storage", "-o", "--resume", "--background",
                         "--steps", "--datasets"]),
    ],
)
def test_help_lists_every_flag(ip, cell, flags):
    with capture_output() as captured:
        ip.run_cell(cell)
    text = captured.stdout
    assert all(flag in text for flag in flags), text
    if cell == "%%jax_cluster?":
        assert "--devices-per-process" not in text and "--platform" not in text


def test_scripts_reach_the_magics_cluster(shared_magics, cluster):
    import jaxnb

    assert jaxnb.current_cluster() is cluster
