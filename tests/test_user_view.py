"""What a user reads around their own code, checked in a real Jupyter kernel (issue 24).

Tracebacks as the front end receives them (``ename``, ``evalue``, ``traceback``),
values that cannot be sent, ``--config`` as typed. One kernel and one 2-process
cluster for the module.
"""

from __future__ import annotations

import time

import pytest
from kernel_harness import Kernel

NOT_OURS = ("do_apply", "_contract.py", "reporting.py", "Could not get source", "_spmd.py",
            "threading.py", "ipyparallel/")


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        k.ok("%load_ext jaxnb")
        k.ok("%jax_cluster start -n 2")
        yield k
        k.ok("%jax_cluster stop")


def test_a_train_error_shows_the_users_frames_with_their_source(kernel, tmp_path):
    kernel.ok("def helper(c):\n    return c['a'] / 0\n\n"
              "def bad(config):\n    x = 1\n    return helper(config)\n")
    out = kernel.run(f"%jax_train bad --config dict(a=1) --storage {tmp_path}")
    assert out.error is not None and out.error["ename"] == "RemoteError", out.shown
    assert out.error["evalue"].startswith("ZeroDivisionError: division by zero"), out.error
    tb = out.traceback
    assert tb.splitlines()[0].startswith("RemoteError: ZeroDivisionError: division by zero"), tb
    for word in NOT_OURS:
        assert word not in tb, tb
    assert "return helper(config)" in tb and "return c['a'] / 0" in tb, tb
    assert "Cell In[" in tb and "in bad(config)" in tb, tb
    full = kernel.value("__import__('sys').last_value.full_traceback")
    assert "do_apply" in full and "reporting.py" in full


def test_a_cell_error_shows_the_cell_and_the_cause_first(kernel):
    out = kernel.run("%%jax_cluster\ndef f():\n    return 1/0\nf()")
    assert out.error["ename"] == "RemoteError"
    lines = out.traceback.splitlines()
    assert lines[0] == "RemoteError: ZeroDivisionError: division by zero (on processes [p0], [p1])"
    assert "----> 2     return 1/0" in out.traceback


def test_an_interrupted_cell_is_one_line_not_jaxnbs_frames(kernel):
    msg_id = kernel.send("%%jax_cluster\nimport time\nprint('started', flush=True)\ntime.sleep(60)")
    kernel.collect(msg_id, timeout=60, until="started")
    time.sleep(0.5)
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=60)
    assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
    assert len(out.error["traceback"]) == 1, out.traceback
    for word in NOT_OURS:
        assert word not in out.traceback, out.traceback
    kernel.ok("%jax_cluster reset")
