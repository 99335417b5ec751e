"""Failures as a notebook meets them: every fault injected into a real Jupyter kernel.

The kernel (``kernel_harness.Kernel``) runs the magics with its own event loop,
threads and signal handling, as JupyterLab, VS Code or papermill run them; the
test reads the messages a front end receives. One kernel and one 2-process
cluster are shared by the module; a test that breaks the group restarts it.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from support.clusters import exited, wait_until
from support.factories import started_kernel, stop_orphaned
from support.fault_cells import ASYNC_LOOP, EXPECTED, SETUP, SYNC_LOOP, VERIFY, WEDGED
from support.kernel_checks import PREPARE, dead, healthy, pids, restart, totals
from support.kernel_harness import Kernel, Output

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

#: The issue's reproduction: process VICTIM kills itself before a pmap psum.
#: Every process writes a line to its real stderr (its engine's log), in a cell of its own.
EARLIER_LINE = "%%jax_cluster\nimport os\nos.write(2, b'jaxnb-test: written before the cell\\n')\n"
SELF_KILL = """\
%%jax_cluster
import os, signal, time, jax, jax.numpy as jnp
if jax.process_index() == {victim}:
    os.write(2, b"jaxnb-test: written during the cell\\n")
    time.sleep(1.0)  # the line reaches the log (ipykernel forwards fd output from a thread)
    os.kill(os.getpid(), signal.SIGKILL)
x = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(jnp.ones(jax.local_device_count()))
x.block_until_ready()
"""
STARTED = "print('started', flush=True)\n"
#: SYNC_LOOP that says "started" once its collective is compiled and every process is in the loop.
IN_THE_LOOP = "x = total(1.0)\n" + STARTED + SYNC_LOOP
TRAIN_FUNCS = """\
def dies_mid_run(config):
    import os, signal, time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    rank = jaxnb.get_context().get_world_rank()
    for step in range(1, 100_000):
        total = multihost_utils.process_allgather(jnp.ones(1)).sum()
        jaxnb.report({"step": step, "total": total})
        if rank == config["victim"] and step == config["at"]:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(config.get("pause", 0))

def stops_when_asked(config):
    import time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    for step in range(1, 100_000):
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step})
        if config and step == 3:  # the run is under way: say so to a test that waits for it
            open(config["flag"], "a").close()
        if jaxnb.should_stop():
            return
        time.sleep(0.02)

def one_more_batch(config):
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    extra = 1 if jaxnb.get_context().get_world_rank() == 1 else 0  # an uneven last batch
    for step in range(1, config["steps"] + 1 + extra):
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step})
"""
#: What every failure message ends with: something the user can run.
WHAT_TO_DO = re.compile(r"(run|use) `%jax_cluster (restart|reset|status)`\)?\.?$")


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """A real kernel with jaxnb loaded and a 2-process cluster; nothing left running after."""
    return make_kernel("-n 2 --devices-per-process 1", PREPARE, "%%jax_cluster\n" + SETUP, TRAIN_FUNCS)


def failure(out: Output, ename: str = "ProcessFailure") -> str:
    """The error's summary (first line of evalue), after checking how the notebook shows it."""
    assert out.status == "error" and out.error is not None, out.shown
    assert out.error["ename"] == ename, out.shown
    summary = out.error["evalue"].splitlines()[0]
    assert re.search(r"\[p\d\]", summary), f"names no process by JAX index: {summary}"
    assert WHAT_TO_DO.search(summary), f"does not end in what to do: {summary}"
    last = out.traceback.rstrip().splitlines()[-1]
    assert last == f"{ename}: {summary}", last
    return summary


def kill_after(k: Kernel, cell: str, victim: int, marker: str = "started"):
    """Run ``cell``; once it printed ``marker``, SIGKILL ``victim``."""
    pid = pids(k)[victim]
    msg_id = k.send(cell)
    k.collect(msg_id, timeout=60, until=marker)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    out = k.collect(msg_id, timeout=120)
    return out, pid, time.monotonic() - killed


# ---- the reproduction --------------------------------------------------------


@pytest.mark.parametrize("victim", [0, 1])
def test_a_process_that_kills_itself_is_named_first(kernel, victim):
    healthy(kernel)
    pid = pids(kernel)[victim]
    kernel.ok(EARLIER_LINE)
    out = kernel.run(SELF_KILL.format(victim=victim))
    summary = failure(out)
    first = summary.split(";")[0]
    assert first.startswith(f"[p{victim}] (pid {pid} on ") and "was killed by SIGKILL" in first
    text = out.traceback
    # The cause comes first in what the notebook shows, with its last lines.
    cause = text.index(f"[p{victim}] (JAX process {victim}, pid {pid} on ")
    other = text.find(f"[p{1 - victim}] (JAX process")
    assert other == -1 or cause < other, text
    # Only what it wrote during this cell is quoted (issue 24), not what an earlier cell wrote.
    assert "last lines of its stderr:\n" in text and "jaxnb-test: written during the cell" in text, text
    assert "jaxnb-test: written before the cell" not in text, text
    assert kernel.value("jaxnb.current_cluster().suspect") == "a process died"
    assert victim in dead(kernel)
    restart(kernel)  # what the message says to do
    assert totals(kernel) == [EXPECTED, EXPECTED]


# ---- deaths at other times -----------------------------------------------------------


def test_a_death_at_idle_is_named_by_the_next_cell(kernel):
    healthy(kernel)
    pid = pids(kernel)[1]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: exited(pid), what=f"engine {pid} ending")
    summary = failure(kernel.run("%%jax_cluster\nprint(1)"))
    assert f"[p1] (pid {pid} on " in summary and "SIGKILL" in summary


@pytest.mark.parametrize("victim", [0, 1])
def test_a_death_mid_collective_is_named_first(kernel, victim):
    healthy(kernel)
    out, pid, _ = kill_after(kernel, "%%jax_cluster\n" + IN_THE_LOOP, victim)
    summary = failure(out)
    assert summary.startswith(f"[p{victim}] (pid {pid} on ") and "SIGKILL" in summary.split(";")[0]


def test_a_death_during_jax_train_names_it_and_shows_the_dashboard(kernel, tmp_path):
    healthy(kernel)
    pid = pids(kernel)[1]
    out = kernel.run(f"%jax_train dies_mid_run --config dict(victim=1, at=20) "
                     f"--storage {tmp_path} -o run")
    summary = failure(out)
    assert summary.startswith(f"[p1] (pid {pid} on ") and "SIGKILL" in summary
    # The dashboard arrived as a live widget (with its static rendering beside it).
    views = [d for d in out.displays if "application/vnd.jupyter.widget-view+json" in d["data"]]
    assert views, [sorted(d["data"]) for d in out.displays]
    assert any(m["msg_type"] == "comm_open" for m in out.messages)
    history = kernel.value("[h['step'] for h in run.history]")
    assert history == list(range(1, len(history) + 1)) and len(history) >= 19


def test_a_death_during_background_training_is_the_runs_error(kernel, tmp_path):
    healthy(kernel)
    pid = pids(kernel)[1]
    out = kernel.ok(f"%jax_train dies_mid_run --config dict(victim=1, at=10**9, pause=0.05) "
                    f"--storage {tmp_path} --background -o run")
    assert out.seconds < 30
    wait_until(lambda: kernel.value("len(run.history) > 0"), what="the first report")
    assert kernel.value("run.running")
    os.kill(pid, signal.SIGKILL)
    error = kernel.value("repr(run.wait(60).error)")
    assert error.startswith("ProcessFailure(") and f"[p1] (pid {pid} on " in error, error
    assert "SIGKILL" in error


# ---- divergence, timeouts, stacks ----------------------------------------------------


def test_divergence_inside_jax_train_is_named_like_in_a_cell(kernel, tmp_path):
    """p0 returns from the function while p1 waits in one more collective: reported within
    the cell's grace (not after gloo's 60 s timeout), naming who finished and where p1 waits."""
    healthy(kernel)
    out = kernel.run(f"%jax_train one_more_batch --config dict(steps=5) --storage {tmp_path} -o run")
    summary = failure(out)
    assert "processes diverged: [p0] finished" in summary, summary
    assert "[p1] at " in summary and "in one_more_batch" in summary, summary
    assert out.seconds < 40, out.seconds  # gloo alone would wait 60 s, then name only p0
    assert "Gloo" not in summary
    assert kernel.value("len(run.history)") == 5
    kernel.ok("%%jax_cluster\nmesh = make_mesh()")  # the group was repaired: a new mesh
    assert totals(kernel) == [EXPECTED, EXPECTED]


def test_divergence_inside_a_background_run_is_its_error(kernel, tmp_path):
    healthy(kernel)
    kernel.ok(f"%jax_train one_more_batch --config dict(steps=5) --storage {tmp_path} "
              "--background -o run")
    error = kernel.value("repr(run.wait(60).error)")
    assert error.startswith("ProcessFailure(") and "processes diverged: [p0] finished" in error, error
    assert "in one_more_batch" in error
    kernel.ok("%%jax_cluster\nmesh = make_mesh()")
    assert totals(kernel) == [EXPECTED, EXPECTED]


def test_stacks_show_the_training_functions_frames(kernel, tmp_path):
    healthy(kernel)
    kernel.ok(f"%jax_train stops_when_asked --storage {tmp_path} --background -o run")
    wait_until(lambda: kernel.value("len(run.history) > 0"), what="the first report")
    out = kernel.ok("%jax_cluster stacks")
    assert "in stops_when_asked" in out.stdout + str(out.displays), out.shown
    assert "idle" not in out.stdout, out.shown
    kernel.ok("run.stop(); run.wait(60)")
    assert kernel.value("run.stopped and run.error is None")


def test_divergence_names_who_finished_and_where_the_others_wait(kernel):
    healthy(kernel)
    out = kernel.run("%%jax_cluster --timeout 120\n"
                     "if jax.process_index() == 1:\n    raise ValueError('bad shard')\n"
                     "print(float(total(1.0)))")
    summary = failure(out)
    assert "processes diverged: [p1] raised ValueError: bad shard" in summary
    assert "[p0] at cell line 3: print(float(total(1.0)))" in summary
    assert "ValueError: bad shard" in out.traceback
    kernel.ok("%%jax_cluster\nmesh = make_mesh()")
    assert totals(kernel) == [EXPECTED, EXPECTED]


def test_a_cell_past_its_timeout_then_stacks(kernel):
    healthy(kernel)
    summary = failure(kernel.run("%%jax_cluster --timeout 2\nimport time\ntime.sleep(60)"))
    assert "ran past its timeout of 2 s" in summary and "[p0], [p1]" in summary
    kernel.ok("%%jax_cluster\nprint('next')")
    # p0 blocked inside a collective that p1 never joins: the stacks magic still works.
    blocked = "if jax.process_index() == 0:\n    print(float(total(1.0)))"
    kernel.ok(f"from jaxnb._core.notebook_cells import remember_cell\nremember_cell({blocked!r})\n"
              f"jaxnb.current_cluster().view.execute({blocked!r}, block=False)")
    wait_until(lambda: kernel.value("in_cell(jaxnb.current_cluster(), [0]) and "
                                    "not in_cell(jaxnb.current_cluster(), [1])"), what="p0 blocked, p1 done")
    out = kernel.ok("%jax_cluster stacks")
    assert "[p0] pid" in out.stdout and "print(float(total(1.0)))" in out.stdout, out.shown
    assert "[p1] pid" in out.stdout and "idle" in out.stdout, out.shown
    kernel.ok("%jax_cluster reset")
    kernel.ok("%%jax_cluster\nmesh = make_mesh()")
    assert totals(kernel) == [EXPECTED, EXPECTED]


# ---- the Stop button -----------------------------------------------------------------


@pytest.mark.timeout(200)
def test_interrupt_trials_through_the_kernel_manager(kernel):
    healthy(kernel)
    rng = random.Random(11)
    wrong = []
    for trial in range(4):
        loop = SYNC_LOOP if trial % 2 == 0 else ASYNC_LOOP
        msg_id = kernel.send("%%jax_cluster --timeout 60\n" + STARTED + loop)
        kernel.collect(msg_id, timeout=60, until="started")
        time.sleep(0.3 + rng.random())
        kernel.interrupt()
        out = kernel.collect(msg_id, timeout=30)
        assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
        assert "jaxnb: interrupted [p0], [p1]" in out.stderr, out.shown
        assert "work already dispatched to XLA is not cancelled" in out.stderr
        check = kernel.run("%%jax_cluster --all --timeout 60\n" + VERIFY)
        if check.error is None:  # the old mesh: the right total or a loud error, never wrong
            wrong += [float(ln.split()[-1]) for ln in check.stdout.splitlines()
                      if "total" in ln and float(ln.split()[-1]) != EXPECTED]
        else:
            assert check.error["ename"] in ("RemoteError", "ProcessFailure"), check.shown
        kernel.ok("%%jax_cluster --timeout 60\nmesh = make_mesh()")
        assert totals(kernel) == [EXPECTED, EXPECTED], f"trial {trial}"
    assert wrong == []


def test_the_stop_button_stops_a_training_run_at_the_same_step(kernel, tmp_path):
    healthy(kernel)
    flag = tmp_path / "under_way"
    msg_id = kernel.send(f"%jax_train stops_when_asked --config dict(flag={str(flag)!r}) "
                         f"--storage {tmp_path} -o run")
    wait_until(flag.exists, what="the run reaching step 3")
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=60)
    assert out.error is None, out.shown
    assert "jaxnb: stopping run 'stops_when_asked'" in out.stdout, out.shown
    assert kernel.value("run.stopped and run.error is None")
    steps = kernel.value("[h['step'] for h in run.history]")
    assert steps == list(range(1, len(steps) + 1)) and steps
    assert kernel.value("jaxnb.current_cluster().suspect") is None
    assert totals(kernel) == [EXPECTED, EXPECTED]


# ---- restart from each state, and a killed kernel -------------------------------------


@pytest.mark.parametrize("state", ["healthy", "wedged", "dead"])
def test_restart_from_each_state(kernel, state):
    healthy(kernel)
    old = pids(kernel)
    before = [psutil.Process(pid) for pid in old]  # knows if its pid is reused later
    if state == "wedged":
        kernel.ok("jaxnb.current_cluster().view.execute('if jax.process_index() == 0:\\n    total(1.0)', "
                  "block=False)")
        wait_until(lambda: kernel.value("in_cell(jaxnb.current_cluster(), [0])"), what="p0 blocked")
    elif state == "dead":
        os.kill(old[0], signal.SIGKILL)
    restart(kernel)
    assert not [p for p in before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert set(old).isdisjoint(pids(kernel))
    assert totals(kernel) == [EXPECTED, EXPECTED]


@pytest.mark.timeout(120)
def test_a_killed_kernels_cluster_goes_on_busy_and_its_stop_leaves_no_process():
    with started_kernel("-n 2", PREPARE, "%%jax_cluster\n" + SETUP) as k:
        name = k.value("jaxnb.current_cluster().options.name")  # default (or default-N)
        k.ok(f"jaxnb.current_cluster().view.execute({WEDGED!r}, block=False)")
        wait_until(lambda: k.value("in_cell(jaxnb.current_cluster(), [0, 1])"), what="both busy")
        k.note_family()
        assert len(k.family) >= 6  # its supervisor, controller and schedulers, 2 engines
        k.kill()
        time.sleep(3)  # the watchdogs look every second: what ends with the kernel has ended
        assert len(k.left_running(wait=0)) >= 4, "the cluster died with its kernel"
        listed = subprocess.run([sys.executable, "-m", "jaxnb", "list"], capture_output=True,
                                text=True, timeout=60)
        assert re.search(rf"^{re.escape(name)} +2 ", listed.stdout, re.M), listed
        stop_orphaned(name)
        left = k.left_running(wait=30)
        assert not left, f"still running 30 s after `python -m jaxnb stop {name}`: {left}"
