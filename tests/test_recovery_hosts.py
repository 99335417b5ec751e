"""``--max-failures`` and warm spares on hosts reached over ssh (a lab of network namespaces).

A 2-host lab and a cluster started by ``%jax_cluster start --hosts A,B`` are this
module's own: its tests kill remote engines (SIGKILL from outside, as the OOM killer
would) and cut a host's link during a run. Skipped (with the reason) where the lab
cannot be built.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import pytest
from IPython.utils.capture import capture_output
from support.clusters import exited, healthy, on_flag, spares_registered, wait_until
from support.fault_cells import COUNTING_LOOP
from test_hosts import engine_processes

from jaxnb import ProcessFailure

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def lab(make_lab):
    """Two lab hosts of this module's own."""
    return make_lab(2)


@pytest.fixture(scope="module")
def cluster(ip, lab, make_cluster):
    """One engine on each lab host, started by the magic with no other flag but a timeout."""
    return make_cluster.by_magic(ip, f"start --hosts {','.join(lab.addresses)} --init-timeout 30")


def _train(ip, tmp_path, name: str) -> object:
    """``%jax_train counting --max-failures 2``; the loop writes ``NAME.flag`` at step 12."""
    ip.user_ns["cfg"] = {"steps": 30, "say_at": 12, "pause": 0.1, "flag": str(tmp_path / f"{name}.flag")}
    with capture_output() as shown:
        ip.run_line_magic(
            "jax_train", f"counting --config cfg --name {name} --storage {tmp_path} "
            f"--max-failures 2 -o result")
    result = ip.user_ns["result"]
    result.shown = shown  # type: ignore[attr-defined]
    return result


def _steps(result) -> list[int]:
    return [h["step"] for h in result.history]


@pytest.mark.timeout(300)
def test_a_remote_engine_killed_during_a_run_is_recovered(cluster, ip, lab, tmp_path):
    healthy(cluster)
    ip.run_cell_magic("jax_cluster", "", COUNTING_LOOP)
    spares = spares_registered(cluster)  # the restart is only a join
    victim = cluster.processes[1]
    hosts = [p.host for p in cluster.processes]
    killer = on_flag(tmp_path / "killed.flag", lambda: os.kill(victim.pid, signal.SIGKILL))
    result = _train(ip, tmp_path, "killed")
    killer.join(1)
    assert result.error is None, result.error
    assert len(result.failures) == 1, result.failures
    failure = result.failures[0]
    assert failure.processes == (1,), failure
    host = next(h for h in lab.hosts if h.hostname == victim.host)
    assert failure.cause.startswith(f"[p1] (pid {victim.pid} on {victim.host}) was killed by "
                                    f"SIGKILL on {host.address}"), failure.cause
    assert failure.resumed_from is not None and failure.resumed_from >= 10, failure
    assert _steps(result) == list(range(1, 31))  # one report per step: the redone ones replaced
    assert [p.host for p in cluster.processes] == hosts  # the same hosts, in the same order
    assert {p.parent_pid for p in cluster.processes} == spares  # the spares took over
    assert cluster.busy_with is None and cluster.suspect is None


def _cut_at_flag(host, path, seconds: float | None) -> threading.Thread:
    """Take ``host``'s link down once the loop writes ``path``; up again after ``seconds``."""

    def cut() -> None:
        host.link(False)
        if seconds is not None:
            threading.Timer(seconds, host.link, (True,)).start()

    return on_flag(path, cut)


@pytest.mark.timeout(300)
def test_a_host_whose_link_is_cut_for_seconds_is_recovered_once_it_answers(cluster, ip, lab,
                                                                           tmp_path):
    """Down long enough to be found unreachable: the restart waits until it answers again."""
    healthy(cluster)
    ip.run_cell_magic("jax_cluster", "", COUNTING_LOOP)
    old = cluster.processes[1]
    host = next(h for h in lab.hosts if h.hostname == old.host)
    cutter = _cut_at_flag(host, tmp_path / "cut.flag", 10.0)
    try:
        result = _train(ip, tmp_path, "cut")
    finally:
        cutter.join(15)
        host.link(True)
    assert result.error is None, result.error
    assert len(result.failures) == 1, result.failures
    failure = result.failures[0]
    assert failure.processes == (1,), failure
    assert f"its engine on {host.address} stopped beating" in failure.cause, failure.cause
    assert _steps(result) == list(range(1, 31))
    assert [p.host for p in cluster.processes] == ["labhost1", "labhost2"]
    wait_until(lambda: exited(old.pid), 15, "the old engine on the cut host ending")


@pytest.mark.timeout(300)
def test_a_host_that_does_not_answer_within_the_init_timeout_ends_the_run_naming_it(
        cluster, ip, lab, tmp_path):
    healthy(cluster)
    ip.run_cell_magic("jax_cluster", "", COUNTING_LOOP)
    host = next(h for h in lab.hosts if h.hostname == cluster.processes[1].host)
    options = cluster.options
    cutter = _cut_at_flag(host, tmp_path / "gone.flag", None)
    try:
        cluster.group.options = dataclasses.replace(options, init_timeout=5)
        with pytest.raises(ProcessFailure) as caught:
            _train(ip, tmp_path, "gone")
    finally:
        cluster.group.options = options
        cutter.join(15)
        host.link(True)
    message = caught.value.summary
    assert f"the recovery failed: StartError: {host.address} did not answer again within " \
        "--init-timeout 5 s" in message, message
    assert len(caught.value.result.failures) == 1
    assert cluster.busy_with is None


@pytest.mark.timeout(300)
def test_a_restart_on_the_hosts_joins_the_warm_spares(cluster, lab):
    healthy(cluster)
    spares = spares_registered(cluster)
    assert len(spares) == 2
    for host in lab.hosts:  # one spare on each host (the shell around it runs there)
        assert len(spares & set(host.pids())) == 1, host.hostname
    old = [p.pid for p in cluster.processes]
    cluster.run("x = 1")
    cluster.restart()
    # The spares became the group (each engine's parent is the shell its launcher started),
    # in the order of --hosts.
    assert {p.parent_pid for p in cluster.processes} == spares
    assert [p.host for p in cluster.processes] == ["labhost1", "labhost2"]
    wait_until(lambda: all(exited(pid) for pid in old), 15, "every old engine ending")
    cluster.run("import numpy as np, jax\nfrom jax.experimental import multihost_utils\n"
                "total = float(multihost_utils.process_allgather(np.ones(1)).sum())")
    assert cluster.pull("total") == 2.0
    with pytest.raises(Exception, match="name 'x' is not defined"):
        cluster.run("x")  # new processes: an empty namespace, as after any restart
    assert not spares_registered(cluster) & spares  # new spares, on their hosts again


@pytest.mark.timeout(180)
def test_stop_leaves_nothing_on_any_host_spares_included(cluster, lab):
    healthy(cluster)
    spares_registered(cluster)
    assert len(engine_processes(lab)) == 2  # the group's and the spares' engines on both hosts
    cluster.stop()
    deadline = time.monotonic() + 15
    while engine_processes(lab) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not engine_processes(lab)
