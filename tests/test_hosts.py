"""Several hosts for real: engines over ssh on a lab of hosts (network namespaces, real sshd).

One 2-host lab and one cluster started by the magic are shared; tests that break
the cluster restart it. Skipped (with the reason) where the lab cannot be built:
not root, or no sshd/iproute2 (``.ci/run`` installs them).
"""

from __future__ import annotations

import _thread
import dataclasses
import os
import threading
import time

import psutil
import pytest
from IPython.utils.capture import capture_output
from lab.lab import SUBNET, Lab
from support.clusters import exited, healthy, in_cell, wait_until
from support.fault_cells import EXPECTED, SETUP, SYNC_LOOP, VERIFY

from jaxnb import JaxCluster, ProcessFailure, StartError
from jaxnb._core import ipp_internals

TRAIN = """\
import jax, jax.numpy as jnp, jaxnb, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

def fit():
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("i",)), P("i"))
    n = 2 * jax.device_count()
    w = jax.make_array_from_callback((n,), sharding, lambda index: np.zeros(2, np.float32))
    bump = jax.jit(lambda w: w + 1)
    for step in range(5):
        w = bump(w)
        jaxnb.report({"step": step, "total": jnp.sum(w)}, checkpoint={"w": w, "step": step})
"""
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def lab(make_lab):
    """Two lab hosts; jaxnb's ssh uses the lab's client config. Torn down even on failure."""
    return make_lab(2)


@pytest.fixture(scope="module")
def cluster(ip, lab, make_cluster):
    """A cluster with one engine on each lab host, started by the magic with no other flag."""
    return make_cluster.by_magic(ip, f"start --hosts {','.join(lab.addresses)}")



def engine_processes(lab: Lab) -> dict[str, list[str]]:
    """Every jaxnb/ipyparallel process on each host (its own process table)."""
    found: dict[str, list[str]] = {}
    for host in lab.hosts:
        for pid in host.pids():
            try:
                cmd = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if not cmd.startswith("sshd") and ("jaxnb" in cmd or "ipyparallel" in cmd):
                found.setdefault(host.hostname, []).append(cmd[:100])
    return found


def settled_engine_processes(lab: Lab, seconds: float = 60.0) -> dict[str, list[str]]:
    """:func:`engine_processes` once it stopped changing (the same two looks 1 s apart): a
    cluster's spares start in the background, each engine spawning its nanny a moment later."""
    deadline = time.monotonic() + seconds
    seen = engine_processes(lab)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now, seen = seen, engine_processes(lab)
        if now == seen:
            break
    return seen


#: On an engine: it reached the controller with the controller's CurveZMQ key.
ENCRYPTS = ("from ipyparallel.engine.app import IPEngine\n"
            "_encrypts = bool(IPEngine.instance().curve_serverkey)")


def test_one_engine_per_host_with_real_addresses(cluster, lab):
    hosts = {p.host: p.address for p in cluster.processes}
    assert hosts == {"labhost1": lab.hosts[0].address, "labhost2": lab.hosts[1].address}
    for host in lab.hosts:  # each engine really runs in its host's namespace
        assert any(p.pid in host.pids() for p in cluster.processes)
    coordinator_host = cluster.coordinator_address.rsplit(":", 1)[0]
    assert coordinator_host == cluster.processes[0].address
    html = cluster.shown.outputs[0].data.get("text/html", "") if cluster.shown.outputs else ""
    assert "labhost1" in html + cluster.shown.stdout and "labhost2" in html + cluster.shown.stdout
    # Engines on other hosts: every ZMQ connection is encrypted (CurveZMQ), and status says so.
    assert "traffic to the engines: encrypted (CurveZMQ) and signed" in html
    assert cluster.group.client.curve_serverkey
    engines = cluster.group.client[:]
    engines.execute(ENCRYPTS, block=True)
    assert engines.pull("_encrypts", block=True) == [True, True]
    # The controller listens on the lab bridge address only (and loopback for its own
    # schedulers), never on every interface.
    controller = ipp_internals.controller_process(cluster.group.ipp)
    listening = {c.laddr.ip for proc in [controller, *controller.children(recursive=True)]
                 for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert listening - {"127.0.0.1"} == {lab.bridge_address}


def test_a_cluster_on_hosts_cannot_be_detached_and_says_so(cluster):
    from jaxnb import ClusterStateError

    with pytest.raises(ClusterStateError, match=r"^this cluster ends with the kernel or script that "
                       r"started it \(its engines are on other hosts, and only a cluster on this "
                       r"machine can be detached for now\); stop it when done$"):
        cluster.detach()
    assert cluster.running


def test_spmd_cells_merged_output_and_pull(cluster, ip, capsys):
    healthy(cluster)
    cell = (
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n"
        "print('same on every host')\n"
        "print('process', jax.process_index(), 'of', jax.process_count())\n"
        "mesh = Mesh(np.array(jax.devices()), ('x',))\n"
        "g = jax.make_array_from_process_local_data(NamedSharding(mesh, P('x')),"
        " np.full((1, 3), jax.process_index(), np.float32))\n"
        "total = float(jax.jit(jnp.sum)(g))\n"
        "print('total', total)\n"
    )
    capsys.readouterr()
    ip.run_cell_magic("jax_cluster", "", cell)
    out = capsys.readouterr().out
    assert out.count("same on every host") == 1
    assert "process 0 of 2" in out and "process 1 of 2" in out
    assert out.count("total 3.0") == 1 and out.rstrip().endswith("total 3.0")  # the same on both
    ip.run_line_magic("jax_pull", "g")
    assert ip.user_ns["g"].tolist() == [[0.0] * 3, [1.0] * 3]
    with capture_output() as shown:
        ip.run_line_magic("jax_mesh", "mesh")
    assert shown.outputs or shown.stdout


def test_timeout_stacks_of_a_process_blocked_in_a_collective_and_reset(cluster, ip):
    healthy(cluster)
    cluster.run(SETUP)
    options = cluster.options
    try:
        cluster.group.options = dataclasses.replace(options, timeout=2)
        with pytest.raises(ProcessFailure, match="timeout of 2 s"):  # not after the 60 s sleep
            ip.run_cell_magic("jax_cluster", "", "import time\ntime.sleep(60)")
    finally:
        cluster.group.options = options
    # p0 blocked inside a collective on its host (p1 never joins): stacks still work.
    blocked = "if jax.process_index() == 0:\n    print(float(total(1.0)))"
    from jaxnb._core.notebook_cells import remember_cell

    remember_cell(blocked)
    cluster.view.execute(blocked, block=False)
    wait_until(lambda: in_cell(cluster, [0]) and not in_cell(cluster, [1]), what="p0 blocked, p1 done")
    with capture_output() as captured:
        ip.run_line_magic("jax_cluster", "stacks")
    out = captured.stdout
    assert f"[p0] pid {cluster.processes[0].pid} on {cluster.processes[0].host}" in out, out
    assert "line 2 of a cell: print(float(total(1.0)))" in out, out
    assert "[p1] pid" in out and "idle" in out, out
    # reset cuts the blocked process's gloo connections on its host, then re-joins the group.
    with capture_output() as captured:
        ip.run_line_magic("jax_cluster", "reset")
    assert "repaired the jax.distributed group in place" in captured.stdout
    ip.run_cell_magic("jax_cluster", "", "mesh = make_mesh()\nassert float(total(1.0)) == 2.0")


def test_interrupt_reaches_every_host(cluster, capsys):
    healthy(cluster)
    cluster.run(SETUP)
    fired: list[float] = []

    def interrupt() -> None:
        fired.append(time.monotonic())
        _thread.interrupt_main()

    threading.Timer(1.5, interrupt).start()
    with pytest.raises(KeyboardInterrupt):  # the loop would otherwise run to its end
        cluster.run(SYNC_LOOP, timeout=60)
    assert fired
    assert "jaxnb: interrupted [p0], [p1]" in capsys.readouterr().err
    cluster.run("mesh = make_mesh()", timeout=60)
    capsys.readouterr()
    cluster.run(VERIFY, all=True, timeout=60)
    out = capsys.readouterr().out
    assert [float(ln.split()[1]) for ln in out.splitlines() if ln.startswith("total")] == [
        EXPECTED, EXPECTED]


def test_train_with_storage_both_hosts_see(cluster, ip, tmp_path):
    healthy(cluster)
    ip.run_cell_magic("jax_cluster", "", TRAIN)
    with capture_output():
        ip.run_line_magic("jax_train", f"fit --storage {tmp_path} -o result")
    result = ip.user_ns["result"]
    assert result.error is None, result.error
    assert [m["step"] for m in result.history] == list(range(5))
    assert result.checkpoint is not None and result.checkpoint.step == 4
    assert str(result.path).startswith(str(tmp_path))


def test_a_host_that_cannot_run_an_engine_fails_start_fast(lab):
    before = settled_engine_processes(lab)  # the shared cluster's, its spares started
    for hosts, python, says in [
        ([lab.hosts[0].address, f"{SUBNET}.99"], None, f"{SUBNET}.99: cannot be reached over ssh"),
        (lab.addresses, "/no/such/python", "no interpreter /no/such/python"),
    ]:
        with pytest.raises(StartError) as caught:  # at once, not after --init-timeout (600 s)
            JaxCluster(hosts=hosts, python=python, init_timeout=600).start()
        assert says in str(caught.value), str(caught.value)
        assert engine_processes(lab) == before


def test_a_host_without_jaxnb_fails_start_naming_it(lab, tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    import venv

    venv.create(tmp_path / "venv", with_pip=False)
    with pytest.raises(StartError, match="cannot import jaxnb, ipyparallel"):
        JaxCluster(hosts=lab.addresses[:1], python=str(python), env={"PYTHONPATH": ""}).start()


def test_a_killed_remote_engine_is_named_within_seconds(cluster, lab):
    healthy(cluster)
    victim = cluster.processes[1]
    threading.Timer(1.0, lambda: os.kill(victim.pid, 9)).start()
    with pytest.raises(ProcessFailure) as caught:  # before p0's 30 s loop ends (bench.failures times it)
        cluster.run("import time\nfor _ in range(300): time.sleep(0.1)\n", timeout=60)
    text = str(caught.value) + "\n".join(getattr(caught.value, "notes", []) or [])
    assert f"on {victim.host}" in text and "was killed by SIGKILL" in text, text
    assert "last lines of its stderr" in text, text
    cluster.restart()
    cluster.run("import jax; assert jax.process_count() == 2")


def test_a_host_whose_link_goes_down_is_named_unreachable(cluster, lab):
    healthy(cluster)
    host = next(h for h in lab.hosts if h.hostname == cluster.processes[1].host)
    threading.Timer(1.0, lambda: host.link(False)).start()
    try:
        with pytest.raises(ProcessFailure) as caught:  # before p0's 30 s loop ends
            cluster.run("import time\nfor _ in range(300): time.sleep(0.1)\n", timeout=60)
    finally:
        host.link(True)
    assert "unreachable" in str(caught.value), str(caught.value)
    cluster.restart()  # the host is back
    cluster.run("import jax; assert jax.process_count() == 2")


def test_stop_after_a_failure_leaves_nothing_on_any_host(cluster, lab):
    healthy(cluster)
    pid = cluster.processes[0].pid
    os.kill(pid, 9)
    wait_until(lambda: exited(pid), what=f"engine {pid} ending")
    started = time.monotonic()
    cluster.stop()
    deadline = started + 10
    while engine_processes(lab) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not engine_processes(lab)


def test_tpu_slice_workers_found_this_one_local_the_other_over_ssh(lab, monkeypatch):
    """TPU_WORKER_HOSTNAMES names this machine (the lab bridge address) and one lab host;
    engines run on CPU here (no TPU), so JAX's own TPU detection is not what joins them."""
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", f"{lab.bridge_address},{lab.hosts[0].address}")
    monkeypatch.delenv("TPU_WORKER_ID", raising=False)
    cluster = JaxCluster(platform="tpu", env={"JAX_PLATFORMS": "cpu"})
    assert cluster.options.hosts == (lab.bridge_address, lab.hosts[0].address)
    assert cluster.options.local_host == lab.bridge_address
    try:
        cluster.start()
        import socket

        assert [(p.host, p.address) for p in cluster.processes] == [
            (socket.gethostname(), lab.bridge_address), ("labhost1", lab.hosts[0].address)]
        local = cluster.processes[0].pid
        assert not any(local in h.pids() for h in lab.hosts)  # this worker's engine runs here
        assert any(cluster.processes[1].pid in h.pids() for h in lab.hosts)
        cluster.run("import jax\nassert jax.process_count() == 2 and jax.device_count() == 2")
    finally:
        cluster.stop()
    assert not psutil.pid_exists(local) or psutil.Process(local).status() == psutil.STATUS_ZOMBIE
