"""Each error leads with its cause, as a notebook receives it in a real Jupyter kernel (issue 31).

A collective whose sizes differ across processes; an array of the group before a repair;
``%%jax_profile`` of a cell that fails; JAX's and jaxnb's frames in an out-of-memory error and
in a divergence inside ``%jax_train``; what a failed run leaves (its dashboard's text, its
folder). One kernel and one 2-process cluster for the module, started without pytest's
``PYTEST_CURRENT_TEST`` so that the engines capture their output as they do for a user.
"""

from __future__ import annotations

import os
import re

import nbformat
import pytest
from support.clusters import wait_until
from support.factories import refused_allocations
from support.fault_cells import SETUP
from support.kernel_checks import PREPARE, broken, healthy, restart

from jaxnb.show_notebook import render

pytestmark = pytest.mark.engines

#: The processes gather arrays of different sizes: 5 elements on p0, 2 on p1.
MISMATCH = """\
%%jax_cluster
from jax.experimental import multihost_utils
x = np.ones(5 if jax.process_index() == 0 else 2, np.float32)
r = multihost_utils.process_allgather(x)
print('gathered', r.shape)
"""
NOT_VALID = "jaxnb: the output below comes from a cell whose collectives did not match in size"
#: A global array, and a training function that uses the module's mesh (both of the group
#: as it is now).
MADE_NOW = """\
%%jax_cluster
g = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), np.ones((1,), np.float32))

def uses_the_mesh():
    import jaxnb
    jaxnb.report({"total": float(total(1.0))})
"""
DIVERGES = """\
%%jax_cluster
def diverges(config):
    import jax, jaxnb
    from jax.experimental import multihost_utils
    import jax.numpy as jnp
    for step in range(3):
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step})
    if jax.process_index() == 1:
        raise ValueError("bad \\"quoted\\" 'shard'")
    multihost_utils.process_allgather(jnp.ones(1))

def saves(config):
    import jaxnb
    for step in range(1, 3):
        jaxnb.report({"step": step}, checkpoint={"step": step})

def plain(config):
    import jaxnb
    for step in range(1, 3):
        jaxnb.report({"step": step})
"""
#: Frames a traceback must not show (kept in ``full_traceback``).
NOT_THE_USERS = ("jax/_src", "ipyparallel/engine/kernel.py", "jaxnb/_core/contract.py",
                 "jaxnb/_engine/run/reporting.py", "File <string>")


@pytest.fixture(scope="module")
def kernel(make_kernel):
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        k = make_kernel("-n 2", "%%jax_cluster\n" + SETUP, PREPARE)
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    return k


def execution_count(out) -> int:
    """The number of the cell that gave ``out`` (``In [N]``)."""
    return next(m["content"]["execution_count"] for m in out.messages if m["msg_type"] == "execute_input")


def test_a_collective_size_mismatch_leads_the_error_and_what_followed_is_not_shown_as_valid(kernel):
    healthy(kernel)
    out = kernel.run(MISMATCH)
    assert out.error is not None, out.shown
    head = out.error["evalue"].splitlines()[0]
    assert head.startswith("collective size mismatch: the processes passed arrays of different "
                           "sizes to one collective ([p1] got more than it expected, gloo's sizes 10 "
                           "vs 4), so gloo aborted [p1]; [p1] (pid "), head
    assert "was killed by SIGABRT" in head and head.endswith("run `%jax_cluster restart`"), head
    assert "Received data size doesn't match expected size" in out.traceback, out.traceback
    # p0 may print what it gathered (garbage) before it is stopped: never as if it were valid.
    if "gathered" in out.stdout:
        assert out.stdout.index(NOT_VALID) < out.stdout.index("gathered"), out.stdout
    assert broken(kernel)
    restart(kernel)


def test_an_array_made_before_a_repair_is_named_with_the_repair(kernel, tmp_path):
    healthy(kernel)
    kernel.ok(MADE_NOW)
    repair = execution_count(kernel.ok("%jax_cluster reset"))
    out = kernel.run("%%jax_cluster\nprint(float(jax.jit(_sum, out_shardings=NamedSharding(mesh, P()))(g)))")
    assert out.error is not None, out.shown
    assert out.error["evalue"].startswith(
        f"`mesh`, `g` were made before the repair at cell {repair}: make them again, or run "
        "`%jax_cluster restart --replay`; "), out.error["evalue"]
    assert not [word for word in NOT_THE_USERS if word in out.traceback], out.traceback
    assert len(out.traceback.splitlines()) < 30, out.traceback
    # A training function that reaches them through its globals: named too.
    out = kernel.run(f"%jax_train uses_the_mesh --storage {tmp_path}")
    assert out.error is not None, out.shown
    assert out.error["evalue"].startswith("`mesh`") and f"before the repair at cell {repair}: " in (
        out.error["evalue"]), out.error["evalue"]
    kernel.ok("%%jax_cluster\nmesh = make_mesh()")
    kernel.ok(MADE_NOW)
    out = kernel.ok("%%jax_cluster\nprint(float(total(1.0)))")
    assert "2.0" in out.stdout, out.shown


def test_a_profile_of_a_failing_cell_names_no_straggler(kernel):
    """p1 raises while p0 waits in a collective (it named p1 the straggler); every process
    raises (steps that end at an error say nothing of speed)."""
    healthy(kernel)
    out = kernel.run("%%jax_profile -o prof\nif jax.process_index() == 1:\n    raise ValueError('boom')\n"
                     "print(float(total(1.0)))")
    assert out.error is not None and "processes diverged: [p1] raised ValueError: boom" in (
        out.error["evalue"]), out.shown
    shown = "\n".join(d["data"].get("text/plain", "") for d in out.displays)
    assert "no straggler named: the cell failed" in shown and "straggler: p" not in shown, shown
    assert "← straggler" not in shown, shown
    assert kernel.value("prof.straggler is None and prof.cause is None and prof.error is not None")
    healthy(kernel)
    out = kernel.run("%%jax_profile -o prof\nimport time\nif jax.process_index() == 1:\n"
                     "    time.sleep(0.5)\nraise ValueError('late')")
    assert out.error is not None and out.error["ename"] == "RemoteError", out.shown
    assert kernel.value("prof.straggler is None and sorted(prof.hosts) == [0, 1] and not prof.missing")
    shown = "\n".join(d["data"].get("text/plain", "") for d in out.displays)
    assert "no straggler named: the cell failed" in shown, shown


#: p1 raises; p0 goes on with its own work (SIGINT ignored, so jaxnb cannot stop it) for 15 s.
STILL_RUNNING = """\
%%jax_profile -o prof
import signal, time
if jax.process_index() == 1:
    raise ValueError('boom')
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    time.sleep(15)
finally:
    signal.signal(signal.SIGINT, signal.default_int_handler)
"""


def test_a_profile_of_a_failing_cell_does_not_wait_for_a_process_still_running_it(kernel):
    """It used to wait up to 30 s for p0's trace; now it returns with p1's, p0's named missing."""
    healthy(kernel)
    out = kernel.run(STILL_RUNNING)
    assert out.error is not None and "processes diverged: [p1] raised ValueError: boom" in (
        out.error["evalue"]), out.shown
    missing = kernel.value("{str(p): why for p, why in prof.missing.items()}")
    assert list(missing) == ["0"] and "it was still running the cell" in missing["0"], missing
    assert kernel.value("sorted(prof.hosts)") == [1]
    wait_until(lambda: not kernel.value("in_cell(jaxnb.current_cluster(), [0])"), what="p0's cell to end")
    healthy(kernel)


@refused_allocations
def test_an_out_of_memory_error_shows_the_users_frames_not_jaxs(kernel):
    healthy(kernel)
    out = kernel.run("%%jax_cluster\nimport jax.numpy as jnp\nz = jnp.zeros((1 << 42,), jnp.float32)\n"
                     "z.block_until_ready()")
    assert out.error is not None and "RESOURCE_EXHAUSTED" in out.error["evalue"], out.shown
    tb = out.traceback
    assert "----> 2 z = jnp.zeros((1 << 42,), jnp.float32)" in tb, tb
    assert not [word for word in NOT_THE_USERS if word in tb], tb
    assert re.search(r"\(\d+ frames of JAX not shown; every frame: ", tb), tb
    assert kernel.value("'jax/_src/' in __import__('sys').last_value.full_traceback")


def test_a_divergence_in_jax_train_shows_the_users_frames_and_its_run_leaves_no_folder(kernel, tmp_path):
    healthy(kernel)
    kernel.ok(DIVERGES)
    out = kernel.run(f"%jax_train diverges --storage {tmp_path}")
    assert out.error is not None and "processes diverged: [p1] raised ValueError" in out.error["evalue"]
    tb = out.traceback
    assert "raise ValueError(\"bad \\\"quoted\\\" 'shard'\")" in tb and "in diverges(config)" in tb, tb
    assert not [word for word in NOT_THE_USERS if word in tb], tb
    assert re.search(r"\(\d frames of jaxnb and ipyparallel not shown; every frame: ", tb), tb
    assert kernel.value("'ipyparallel/engine/kernel.py' in __import__('sys').last_value.full_traceback")
    # The dashboard as a text viewer reads the saved notebook: quotes, not HTML entities.
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "%jax_train diverges", outputs=[nbformat.v4.new_output("display_data", data=d["data"])
                                        for d in out.displays])])
    saved = tmp_path / "saved.ipynb"
    nbformat.write(notebook, saved)
    text = render(str(saved))
    assert "status  failed — processes diverged: [p1] raised ValueError: bad \"quoted\" 'shard'" in (
        text), text
    assert "&quot;" not in text and "&#x27;" not in text, text
    # A failed run, a refused run and a run without checkpoints leave no folder; a checkpoint stays,
    # with the run's reports and its lock.
    refused = kernel.run(f"%jax_train no_such_function --storage {tmp_path}/refused")
    assert refused.error is not None or "UsageError" in refused.stderr, refused.shown
    kernel.ok(f"%jax_train plain --storage {tmp_path}")
    kernel.ok(f"%jax_train saves --storage {tmp_path}")
    assert sorted(os.listdir(tmp_path)) == ["saved.ipynb", "saves"], os.listdir(tmp_path)
    assert sorted(os.listdir(tmp_path / "saves")) == ["checkpoints", "reports.jsonl", "run.lock"]
