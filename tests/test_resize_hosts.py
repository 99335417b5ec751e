"""``--min-processes`` on hosts reached over ssh (a lab of 3 network namespaces with real sshd).

``%jax_train … --max-failures 2 --min-processes 2 --background`` on one engine per host, with
the warm spares (one per process). The third host's link goes down for good: the run goes on
with 2 processes, on the spares of the first two hosts (``%jax_cluster status`` shows the lost
host); the link comes back: the run grows back to 3 at its next checkpoint. Every row of the
epoch is read exactly once across both changes, the loss curve goes on where it was, and the
losses and final weights are those of plain SGD on the same global batches. A host whose engine
stalls for 1 s (SIGSTOP, then SIGCONT: shorter than the controller's heartbeat limit) is merely
slow: the run goes on at 3 with no failure.
Skipped (with the reason) where the lab cannot be built; run under ``flock /tmp/jaxnb-lab.lock``.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from IPython.utils.capture import capture_output
from support.clusters import on_flag, spares_registered, wait_until
from test_hosts import engine_processes
from test_resize import DATA, GLOBAL_BATCH, LOOP, ROWS, plain_sgd

from jaxnb._core.heartbeat import SILENCE_SECONDS
from jaxnb._hosts import remote_launchers, ssh
from jaxnb._lifecycle.refill import NO_SPARE
from jaxnb._train.resize import GRACE_SECONDS

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def lab(make_lab):
    """Three lab hosts of this module's own."""
    return make_lab(3)


@pytest.fixture(scope="module")
def cluster(ip, lab, make_cluster):
    """One engine on each lab host, and a warm spare on each."""
    made = make_cluster.by_magic(ip, f"start --hosts {','.join(lab.addresses)} --init-timeout 30")
    ip.run_cell_magic("jax_cluster", "", DATA)
    ip.run_cell_magic("jax_cluster", "", LOOP)
    return made


def _places(cluster, pids: set[int]) -> list[str]:
    """The ``--hosts`` targets of the engines launched with these pids."""
    launchers = [lch for s in remote_launchers.ssh_sets(cluster.group.ipp) for lch in s.launchers.values()]
    return sorted(ssh.place(lch)[0] for lch in launchers if ssh.started_pid(lch) in pids)


def _train(ip, tmp_path, name: str, **config) -> object:
    """``%jax_train elastic --min-processes 2 --background`` on ``elastic_data``; the run."""
    flags = tmp_path / "flags"
    flags.mkdir(exist_ok=True)
    ip.user_ns["cfg"] = {"steps": ROWS // GLOBAL_BATCH, "global_batch": GLOBAL_BATCH, "lr": 0.05,
                         "pause": 0.6, "flags": str(flags), **config}
    with capture_output() as shown:
        ip.run_line_magic("jax_train", f"elastic --config cfg --name {name} --storage {tmp_path} "
                          "--datasets train=elastic_data --max-failures 2 --min-processes 2 "
                          "--background -o run")
    assert "--background" not in shown.stderr  # the run started without a complaint
    return ip.user_ns["run"]


@pytest.mark.timeout(300)
def test_a_host_whose_engine_stalls_for_1_s_is_slow_not_lost(cluster, ip, tmp_path):
    assert SILENCE_SECONDS >= 1.5  # the margin this test keeps
    victim = cluster.processes[2].pid  # the lab's hosts share this machine's process table
    stalled = threading.Event()

    def stall() -> None:
        os.kill(victim, signal.SIGSTOP)
        try:
            time.sleep(1.0)
        finally:
            os.kill(victim, signal.SIGCONT)
            stalled.set()

    staller = on_flag(tmp_path / "flags" / "step5.on3", stall)
    run = _train(ip, tmp_path, "stall", pause=0.2)
    run.wait(240)
    staller.join(5)
    assert stalled.is_set(), "the engine was never stalled"
    assert run.error is None and run.failures == [], (run.error, run.failures)
    history = run.history
    assert [h["world"] for h in history] == [3] * (ROWS // GLOBAL_BATCH)
    assert sorted(r for h in history for r in h["ids"]) == list(range(ROWS))  # the epoch, once
    assert cluster.processes[2].pid == victim and cluster.lost == []


@pytest.mark.timeout(600)
def test_a_host_cut_for_good_leaves_the_run_on_2_and_it_grows_back_when_the_host_answers(
        cluster, ip, lab, tmp_path):
    flags = tmp_path / "flags"
    flags.mkdir()
    third = next(h for h in lab.hosts if h.hostname == cluster.processes[2].host)
    hold = flags / "hold"  # the run waits on 2 processes until the grow was asked: no race
    hold.touch()
    spares = spares_registered(cluster)  # the shrink joins those of the first two hosts
    cutter = on_flag(flags / "step5.on3", lambda: third.link(False))
    try:
        run = _train(ip, tmp_path, "hosts", hold=str(hold))
        wait_until(lambda: list(flags.glob("*.on2")) or not run.running, 180, "a step on 2 processes")
        assert all({p.pid, p.parent_pid} & spares for p in cluster.processes), (cluster.processes, spares)
        assert [p.host for p in cluster.processes] == [h.hostname for h in lab.hosts[:2]]
        assert cluster.lost == [f"{third.address}: did not answer within {GRACE_SECONDS:g} s since step "
                                f"{run.failures[0].step}"], cluster.lost
        with capture_output() as status:
            ip.run_line_magic("jax_cluster", "status")
        page = status.outputs[0].data["text/html"]
        assert "2 processes" in page and "1 lost" in page and third.address in page, page
        refilled = spares_registered(cluster)  # new spares, on the two hosts left
        assert not refilled & spares and _places(cluster, refilled) == sorted(lab.addresses[:2])
    finally:
        cutter.join(1)
        third.link(True)
    try:
        wait_until(lambda: getattr(cluster.group.resize, "wanted", None) is not None or not run.running,
                   120, "the grow asked once the host answers")
    finally:
        hold.unlink()
    run.wait(300)
    assert run.error is None, run.error
    shrink, grow = run.failures
    assert (shrink.processes, shrink.old_size, shrink.new_size) == ((2,), 3, 2), shrink
    assert f"its engine on {third.address} stopped beating" in shrink.cause, shrink.cause
    assert not [p for p in shrink.phases if p.startswith(NO_SPARE)], shrink.phases  # on the spares
    assert (grow.processes, grow.old_size, grow.new_size) == ((), 2, 3), grow
    assert grow.cause == f"{third.address} answers again", grow
    history = run.history
    assert [h["step"] for h in history] == list(range(1, ROWS // GLOBAL_BATCH + 1))
    assert [h["world"] for h in history] == [3] * shrink.resumed_from \
        + [2] * (grow.step - shrink.resumed_from) + [3] * (len(history) - grow.step)
    assert sorted(r for h in history for r in h["ids"]) == list(range(ROWS))  # the epoch, once
    losses, w = plain_sgd(history)
    np.testing.assert_allclose([h["loss"] for h in history], losses, rtol=1e-4)  # goes on
    np.testing.assert_allclose(history[-1]["w"], w, rtol=1e-4, atol=1e-6)
    assert [p.host for p in cluster.processes] == [h.hostname for h in lab.hosts]
    assert cluster.lost == [] and cluster.busy_with is None


@pytest.mark.timeout(180)
def test_stop_leaves_nothing_on_any_host(cluster, lab):
    cluster.stop()
    deadline = time.monotonic() + 30
    while engine_processes(lab) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not engine_processes(lab)
