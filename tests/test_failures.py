"""Failures are loud: fault injection on real engines (kill -9, divergence, hangs, interrupts).

One module cluster is shared; tests that break it restart it. Time bounds are
generous (the test machine is small and shared); ``bench/failures.py`` measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from IPython.utils.capture import capture_output
from support.clusters import healthy, in_cell, totals, wait_until
from support.fault_cells import ASYNC_LOOP, EXPECTED, SETUP, SYNC_LOOP, VERIFY

from jaxnb import ClusterStateError, JaxCluster, ProcessFailure, RemoteError, StartError
from jaxnb._core import ipp_internals
from jaxnb._core.notebook_cells import remember_cell
from jaxnb._failures import stacks
from jaxnb._hosts import site
from jaxnb._lifecycle import startup

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def cluster(ip, make_cluster):
    """A 2-process cluster started by the magic with a cluster-wide cell timeout."""
    c = make_cluster.by_magic(ip, "start -n 2 --timeout 30")
    assert c.options.timeout == 30
    c.run(SETUP)
    return c




# ---- 1. dead processes ---------------------------------------------------------------


@pytest.mark.parametrize("victim", [1, 0], ids=["non-coordinator", "coordinator"])
def test_a_killed_process_is_named_within_seconds(cluster, victim, capsys):
    healthy(cluster, SETUP)
    info = cluster.processes[victim]
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(info.pid, signal.SIGKILL)

    threading.Timer(1.5, kill).start()
    with pytest.raises(ProcessFailure) as caught:
        cluster.run(SYNC_LOOP, timeout=60)
    detected = time.monotonic() - killed_at[0]
    assert detected < 5, f"took {detected:.1f} s to notice"
    text = str(caught.value)
    assert f"[p{victim}] (pid {info.pid} on {info.host}) was killed by SIGKILL" in text
    # Only what the engine wrote during this cell is quoted (issue 24); killed from outside,
    # it wrote nothing.
    assert "it wrote nothing to its stderr during this cell" in text and "%jax_cluster restart" in text
    assert victim in caught.value.processes
    # The survivors are not left waiting out JAX's heartbeat: jaxnb stopped them.
    assert all(p.state == "dead" for p in cluster.status())
    with pytest.raises(ClusterStateError, match="run `%jax_cluster restart`"):
        cluster.run("print(1)")
    cluster.restart()
    cluster.run(SETUP)
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


def test_a_process_killed_between_cells_is_named_by_the_next_cell(cluster):
    """Killed while no cell runs, its engine dropped by the controller before the next cell:
    that cell names it (ipyparallel alone fails with ``KeyError: <engine id>``)."""
    healthy(cluster, SETUP)
    info = cluster.processes[1]
    os.kill(info.pid, signal.SIGKILL)
    wait_until(lambda: info.engine_id not in cluster.client.ids, 30, "the controller to drop p1")
    with pytest.raises(ClusterStateError) as caught:
        cluster.run("print(1)")
    assert f"[p1] (pid {info.pid} on {info.host}) was killed by SIGKILL" in str(caught.value)
    assert "run `%jax_cluster restart`" in str(caught.value)
    cluster.restart()
    cluster.run(SETUP)
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


def test_a_dead_process_s_last_words_are_quoted_even_when_its_log_lags(cluster):
    """The words a process dies with reach its log through its stderr tee, a separate process
    that may run late on a loaded machine (stopped here until 0.8 s after the death): the
    error waits for the tee to end, so they are quoted (CI lost gloo's line this way)."""
    healthy(cluster, SETUP)
    info = cluster.processes[1]
    assert info.log_writer_pid > 0, info
    tee = psutil.Process(info.log_writer_pid)
    tee.suspend()
    dead = threading.Event()

    def resume_after_the_death() -> None:
        while not dead.wait(0.05):
            if not psutil.pid_exists(info.pid) or psutil.Process(info.pid).status() == psutil.STATUS_ZOMBIE:
                time.sleep(0.8)
                break
        tee.resume()

    threading.Thread(target=resume_after_the_death, daemon=True).start()
    try:
        with pytest.raises(ProcessFailure) as caught:
            cluster.run("import os, time\nif jax.process_index() == 1:\n"
                        "    os.write(2, b'the words it died with\\n')\n    os.abort()\ntime.sleep(30)",
                        timeout=60)
    finally:
        dead.set()
        with contextlib.suppress(psutil.Error):
            tee.resume()
    text = str(caught.value)
    assert "[p1]" in text and "SIGABRT" in text, text
    assert "the words it died with" in text, text
    cluster.restart()
    cluster.run(SETUP)


# ---- 2. divergence ---------------------------------------------------------------------


def test_divergence_names_who_finished_and_where_the_others_wait(cluster, capsys):
    healthy(cluster, SETUP)
    code = "if jax.process_index() == 1:\n    raise ValueError('bad shard')\nprint(float(total(1.0)))"
    start = time.monotonic()
    with pytest.raises(ProcessFailure) as caught:
        cluster.run(code, timeout=120)
    assert time.monotonic() - start < 12
    summary = caught.value.summary
    assert "processes diverged: [p1] raised ValueError: bad shard" in summary
    assert "[p0] at cell line 3: print(float(total(1.0)))" in summary
    text = str(caught.value)
    assert "ValueError: bad shard" in text  # p1's traceback
    assert re.search(r"line 1[45] of an earlier cell in total", text)  # p0's stack, in total()
    assert cluster.suspect == "processes diverged"
    # The next cell repairs the group in place; Python state is kept.
    cluster.run("kept = 41")
    err = capsys.readouterr().err
    assert "repaired the jax.distributed group in place" in err
    assert cluster.suspect is None
    cluster.run("mesh = make_mesh()\nkept += 1")
    assert cluster.pull("kept") == 42
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


def test_a_process_left_alone_in_a_collective_is_divergence(cluster, capsys):
    healthy(cluster, SETUP)
    # Work on process 0 only is fine: it is computing or sleeping, not waiting for peers.
    cluster.run("import time\nif jax.process_index() == 0:\n    time.sleep(5)", timeout=60)
    assert cluster.suspect is None
    # A collective on process 0 only is not: process 1 finished and will never join.
    start = time.monotonic()
    with pytest.raises(ProcessFailure) as caught:
        cluster.run("if jax.process_index() == 0:\n    print(float(total(1.0)))", timeout=120)
    assert time.monotonic() - start < 12
    assert "processes diverged: [p1] finished" in caught.value.summary
    assert "[p0] at cell line 2: print(float(total(1.0)))" in caught.value.summary
    cluster.run("mesh = make_mesh()")
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


# ---- 3. hangs, timeouts and stacks ----------------------------------------------------


def test_a_cell_past_its_timeout_shows_every_stack(cluster, capsys):
    healthy(cluster, SETUP)
    start = time.monotonic()
    with pytest.raises(ProcessFailure) as caught:
        cluster.run("import time\ntime.sleep(60)", timeout=2)
    assert time.monotonic() - start < 8
    text = str(caught.value)
    assert "ran past its timeout of 2 s" in caught.value.summary
    assert text.count("cell line 2: time.sleep(60)") >= 2
    assert "[p0], [p1] stopped" in text
    # A plain sleep leaves the group in step: the check passes, no reset is needed.
    cluster.run("print('next')")
    assert "repaired" not in capsys.readouterr().err
    assert cluster.suspect is None


def test_stack_dumps_are_recognised_once_complete(cluster):
    """A dump ends at the main thread's outermost frame, so reading it does not wait out
    its timeout (missing that once added a second to every timeout and interrupt)."""
    healthy(cluster, SETUP)
    paths = stacks.request(cluster.group, cluster.process_indices)
    assert sorted(paths) == cluster.process_indices

    def dumped(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:  # not written yet
            return ""

    # the engines' signal handlers write at once: each dump is soon complete
    wait_until(lambda: all(stacks.is_complete(dumped(p)) for p in paths.values()), 10, "complete dumps")
    assert [stacks.where(dumped(p)) for p in paths.values()] == ["idle", "idle"]


def test_the_cluster_wide_timeout_and_stacks_magic(cluster, ip):
    healthy(cluster, SETUP)
    options = cluster.options
    try:
        cluster.group.options = dataclasses.replace(options, timeout=2)
        with pytest.raises(ProcessFailure, match="timeout of 2 s"):
            ip.run_cell_magic("jax_cluster", "", "import time\ntime.sleep(60)")
        cluster.group.options = options
        # p0 blocked inside a collective (p1 never joins): stacks still work.
        blocked = "if jax.process_index() == 0:\n    print(float(total(1.0)))"
        remember_cell(blocked)
        cluster.view.execute(blocked, block=False)
        wait_until(lambda: in_cell(cluster, [0]) and not in_cell(cluster, [1]), what="p0 blocked, p1 done")
        with capture_output() as captured:
            ip.run_line_magic("jax_cluster", "stacks")
        out = captured.stdout
        assert "[p0] pid" in out and "line 2 of a cell: print(float(total(1.0)))" in out
        assert "[p1] pid" in out and "idle" in out
        with capture_output() as captured:
            ip.run_line_magic("jax_cluster", "reset")
        assert "repaired the jax.distributed group in place" in captured.stdout
        ip.run_cell_magic("jax_cluster", "", "mesh = make_mesh()")
    finally:
        cluster.group.options = options


# ---- 4 and 5. interrupts, then no silent wrong answers -------------------------------


@pytest.mark.timeout(200)
def test_interrupt_trials_never_give_a_wrong_value_or_hang(cluster, capsys):
    healthy(cluster, SETUP)
    rng = random.Random(7)
    wrong, loud, repaired = [], 0, 0
    for trial in range(6):
        loop = SYNC_LOOP if trial % 2 == 0 else ASYNC_LOOP
        fired: list[float] = []
        threading.Timer(1.0 + rng.random(), _interrupt_kernel, args=(fired,)).start()
        with pytest.raises(KeyboardInterrupt):
            cluster.run(loop, timeout=60)
        back = time.monotonic() - fired[0]
        assert back < 8, f"trial {trial}: the notebook came back after {back:.1f} s"
        err = capsys.readouterr().err
        assert "jaxnb: interrupted [p0], [p1]" in err
        assert "work already dispatched to XLA is not cancelled" in err
        # The old mesh: the right total, or a loud error; never a wrong number.
        try:
            values = totals(cluster, VERIFY)
        except (RemoteError, ClusterStateError):
            loud += 1
        else:
            wrong.extend(v for v in values if v != EXPECTED)
        repaired += "repaired the jax.distributed group" in capsys.readouterr().err
        cluster.run("mesh = make_mesh()", timeout=60)
        assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED], f"trial {trial}"
    assert wrong == []
    print(f"{loud} loud errors, {repaired} repairs in 6 trials", file=sys.stderr)


def test_a_signal_through_ipyparallel_gives_up_on_an_engine_that_never_answers(cluster):
    """A batch launcher's engines are signalled through ipyparallel; an engine that never
    replies (its Slurm step was killed: the nanny too) must not hold the notebook for ever."""
    from jaxnb._hosts import site_jobs

    engine = psutil.Process(cluster.processes[1].pid)
    engine.suspend()  # no reply until it resumes (local engines have no nanny to answer)
    try:
        began = time.monotonic()
        site_jobs.Site().signal(cluster.group, [1], signal.SIGCONT)
        waited = time.monotonic() - began
    finally:
        engine.resume()
    assert site_jobs.SIGNAL_REPLY_SECONDS - 0.5 < waited < site_jobs.SIGNAL_REPLY_SECONDS + 5, waited
    cluster.restart()  # the controller's heartbeat gave the silent engine up meanwhile
    cluster.run(SETUP)
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


# ---- 6. restart and stop -------------------------------------------------------------


def test_restart_works_from_a_wedged_cluster(cluster, capsys):
    healthy(cluster, SETUP)
    cluster.view.execute("if jax.process_index() == 0:\n    total(1.0)", block=False)
    wait_until(lambda: in_cell(cluster, [0]), what="p0 blocked in the collective")
    old = {p.pid for p in cluster.processes}
    start = time.monotonic()
    cluster.stop()
    assert time.monotonic() - start < 10
    assert not any(psutil.pid_exists(pid) for pid in old)
    cluster.start()
    assert old.isdisjoint(p.pid for p in cluster.processes)
    cluster.run(SETUP)
    assert totals(cluster, VERIFY) == [EXPECTED, EXPECTED]


def test_stop_is_fast_and_leaves_nothing(cluster):
    healthy(cluster, SETUP)
    # This cluster's engines, nannies and controller (other tests' clusters may be running).
    roots = [psutil.Process(p.pid) for p in cluster.processes]
    roots.append(ipp_internals.controller_process(cluster.group.ipp))
    ours = [*roots, *(c for r in roots for c in r.children(recursive=True))]
    keys = ipp_internals.key_files(cluster.group.ipp)
    stacks_dir = cluster.group.stacks_dir
    start = time.monotonic()
    cluster.stop()
    assert time.monotonic() - start < 2
    assert not [p for p in ours if _running(p)]
    assert not [k for k in keys if os.path.exists(k)]
    assert stacks_dir and not os.path.exists(stacks_dir)


# ---- 7. orphans ----------------------------------------------------------------------

BUSY_KERNEL = os.path.join(os.path.dirname(__file__), "support", "busy_kernel.py")


@pytest.mark.timeout(120)
def test_every_process_exits_when_the_kernel_is_killed(tmp_path):
    kernel = subprocess.Popen([sys.executable, BUSY_KERNEL], stdout=subprocess.PIPE, text=True)
    try:
        launched = json.loads(kernel.stdout.readline())
    finally:
        kernel.kill()
        kernel.wait()
    pids, files = launched["pids"], launched["files"]
    assert len(pids) >= 5  # controller and its schedulers, 2 engines
    deadline = time.monotonic() + 30
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [pid for pid in left if _pid_running(pid)]
    assert not left, f"still running 30 s after the kernel died: {left}"
    assert not [f for f in files if os.path.exists(f)]


# ---- 8. start failures ---------------------------------------------------------------


def test_start_fails_fast_on_a_busy_coordinator_port(monkeypatch):
    """The coordinator port is taken by another program."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = f"127.0.0.1:{blocker.getsockname()[1]}"
    monkeypatch.setattr(site.LOCAL, "coordinator_address", lambda group, first_engine: busy)
    cluster = JaxCluster(n=2, init_timeout=20)
    start = time.monotonic()
    try:
        failed_to_join = r"process 0 \(pid \d+\) (could not join|was killed|exited while joining)"
        with pytest.raises(StartError, match=failed_to_join):
            cluster.start()
    finally:
        blocker.close()
    assert time.monotonic() - start < 30
    assert not cluster.running


def test_start_fails_fast_when_a_process_dies_while_joining(monkeypatch):
    """Process 1 is killed as the group forms."""
    wait_joined = startup.wait_joined

    def kill_then_wait(group, pending: dict, pids: dict, coordinator: str) -> dict:
        os.kill(pids[1], signal.SIGKILL)
        return wait_joined(group, pending, pids, coordinator)

    monkeypatch.setattr(startup, "wait_joined", kill_then_wait)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cluster = JaxCluster(n=2, init_timeout=30)
    start = time.monotonic()
    with pytest.raises(StartError) as caught:
        cluster.start()
    assert time.monotonic() - start < 25
    assert "process 1 (pid" in str(caught.value)
    assert "was killed by SIGKILL while joining jax.distributed" in str(caught.value)
    assert not cluster.running
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and _running(p)]
    assert not left, "start left processes behind"


# ---- helpers -------------------------------------------------------------------------


def _interrupt_kernel(fired: list[float]) -> None:
    """What Jupyter does to the kernel: SIGINT, so the main thread gets a KeyboardInterrupt."""
    fired.append(time.monotonic())
    signal.raise_signal(signal.SIGINT)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pid_running(pid: int) -> bool:
    try:
        return _running(psutil.Process(pid))
    except psutil.Error:
        return False
