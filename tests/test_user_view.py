"""What a user reads around their own code, checked in a real Jupyter kernel (issue 24).

Tracebacks as the front end receives them (``ename``, ``evalue``, ``traceback``),
values that cannot be sent, ``--config`` as typed. One kernel and one 2-process
cluster for the module.
"""

from __future__ import annotations

import re
import time

import pytest
from support.factories import started_kernel
from support.kernel_checks import usage_error

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines
NOT_OURS = ("do_apply", "_contract.py", "reporting.py", "Could not get source", "_spmd.py",
            "threading.py", "ipyparallel/")



@pytest.fixture(scope="module")
def kernel(make_kernel):
    return make_kernel("-n 2 --spares 0")


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
    assert out.error["evalue"].startswith("ZeroDivisionError: division by zero (on processes [p0], [p1])")
    lines = out.traceback.splitlines()
    assert lines[0] == "RemoteError: ZeroDivisionError: division by zero (on processes [p0], [p1])"
    assert "----> 2     return 1/0" in out.traceback


def test_an_interrupted_cell_is_one_line_not_jaxnbs_frames(kernel):
    msg_id = kernel.send("%%jax_cluster\nimport time\nprint('started', flush=True)\ntime.sleep(60)")
    kernel.collect(msg_id, timeout=60, until="started")  # the cell runs on the engines
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=60)
    assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
    assert len(out.error["traceback"]) == 1, out.traceback
    for word in NOT_OURS:
        assert word not in out.traceback, out.traceback
    kernel.ok("%jax_cluster reset")


def test_pushing_and_pulling_what_cannot_be_pickled_is_one_line(kernel):
    line = usage_error(kernel.run("import threading\nlock = threading.Lock()\n%jax_push lock"))
    assert line.startswith("UsageError: %jax_push lock: it cannot be sent to the engines "
                           "(TypeError: cannot pickle '_thread.lock' object)"), line
    kernel.ok("%%jax_cluster\nimport threading\nelock = threading.Lock()")
    line = usage_error(kernel.run("%jax_pull elock"))
    assert line.startswith("UsageError: %jax_pull elock: its value on process 0 cannot be sent "
                           "to the notebook (TypeError: cannot pickle"), line


def test_a_large_value_sent_is_named_with_its_size_once(kernel, tmp_path):
    # jaxnb._cells.pull.LARGE_BYTES (100 MiB) lowered so that the test sends 8 MB, not 200.
    kernel.ok("import numpy as np, jaxnb._cells.pull\njaxnb._cells.pull.LARGE_BYTES = 4_000_000\n"
              "big = np.zeros(1_000_000)\nsmall = np.zeros(10)")
    out = kernel.ok("%jax_push big small")
    assert out.stderr.count("jaxnb: `big` is 8.0 MB pickled; it is sent to each of the 2 processes") == 1
    assert "small" not in out.stderr
    kernel.ok("def uses_big():\n    return float(big.sum())")
    out = kernel.ok(f"%jax_train uses_big --storage {tmp_path}")
    assert out.stderr.count("jaxnb: `uses_big` with what it uses from the notebook is 8.0 MB") == 1, out.shown
    kernel.ok("jaxnb._cells.pull.LARGE_BYTES = 100 * 2**20")


def test_config_is_evaluated_the_same_quoted_or_not_and_checked(kernel, tmp_path):
    kernel.ok("def wants_dict(config):\n    assert isinstance(config, dict), type(config)\n\n"
              "def wants_int(n: int):\n    assert n == 5\n")
    for typed in ('dict(lr=0.1)', '"dict(lr=0.1)"', "'dict(lr=0.1)'"):
        kernel.ok(f"%jax_train wants_dict --config {typed} --storage {tmp_path} --name q")
    line = usage_error(kernel.run(f"%jax_train wants_dict --config 5 --storage {tmp_path}"))
    assert line == ("UsageError: --config 5 is an int, but wants_dict() takes a config dict: "
                    "pass e.g. --config dict(lr=0.1) (or annotate its parameter, `config: int`)")
    kernel.ok(f"%jax_train wants_int --config 5 --storage {tmp_path}")
    line = usage_error(kernel.run(f"%jax_train wants_dict --config 'lr' --storage {tmp_path}"))
    assert "could not be evaluated in the notebook: NameError" in line


def test_a_long_cell_keeps_every_processs_last_line_and_shared_lines_unlabelled(kernel):
    out = kernel.ok("%%jax_cluster\nimport jax\nfor i in range(1500): print(i)\n"
                    "print('last', jax.process_index())")
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["[p0] last 0", "[p1] last 1"], lines[-5:]
    assert [x for x in lines if x.startswith("[p")] == ["[p0] last 0", "[p1] last 1"]
    assert "not shown" not in out.stdout
    # past the cap (2,000 lines after merging): one note, then the tail with every process's last line
    out = kernel.ok("%%jax_cluster\nimport jax\nfor i in range(3000): print(i)\n"
                    "print('last', jax.process_index())")
    lines = out.stdout.splitlines()
    assert lines[-3:] == ["2999", "[p0] last 0", "[p1] last 1"], lines[-5:]
    notes = [x for x in lines if x.startswith("[jaxnb] ")]
    assert len(notes) == 1 and notes[0].startswith("[jaxnb] 1,002 lines of output not shown"), notes
    assert len(lines) == 2001 and [x for x in lines if x.startswith("[p")] == lines[-2:]


def test_a_cells_last_expression_is_out_n_and_underscore_as_in_ipython(kernel):
    out = kernel.ok("%%jax_cluster\nimport jax\n{'a': 1, 'p': jax.process_index()}")
    assert out.result is not None, out.shown  # an execute_result: Out[n]
    assert out.result["data"]["text/plain"] == "{'a': 1, 'p': 0}"
    assert not [d for d in out.displays if d.get("data")], out.displays  # shown once: as Out[n]
    assert kernel.value("[_['a'], _['p'], type(_).__name__]") == [1, 0, "dict"]
    out = kernel.ok("%%jax_cluster\nimport jax.numpy as jnp\njnp.arange(3)")
    assert "Array([0, 1, 2]" in out.result["data"]["text/plain"], out.shown
    assert kernel.value("repr(_)").startswith("Array([0, 1, 2]")  # shown, not loaded: no JAX here
    assert kernel.value("'jax' in __import__('sys').modules") is False


MESH_CELL = """\
%%jax_cluster
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("data",))
params = {"w1": jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("data"))),
          "b": jax.device_put(jnp.zeros(4), NamedSharding(mesh, P()))}
"""


def test_jax_mesh_draws_a_pytree_an_expression_and_reads_as_text(kernel):
    kernel.ok(MESH_CELL)
    out = kernel.ok("%jax_mesh params")
    (bundle,) = [d["data"] for d in out.displays]
    lines = bundle["text/plain"].splitlines()
    assert lines[0] == "Pytree params: 2 leaves, 80 B per device", lines
    assert lines[1].split() == ["leaf", "shape", "dtype", "spec", "bytes", "per", "device"]
    assert lines[2].split() == ["['b']", "(4,)", "float32", "P()", "16", "B"]
    assert lines[3].split() == ["['w1']", "(8,", "4)", "float32", "P('data',)", "64", "B"]
    assert "<table" in bundle["text/html"] and "64 B" in bundle["text/html"]
    out = kernel.ok("%jax_mesh params['w1']")
    text = out.displays[0]["data"]["text/plain"].splitlines()
    assert text[0].startswith("Array params['w1'] float32[8, 4] NamedSharding spec P('data', None)"), text
    assert text[1].split() == ["block", "devices", "processes"], text
    assert text[2].split()[::2] == ["[0:4,", "0"] and text[2].endswith("p0"), text
    assert text[3].startswith("[4:8, 0:4]") and text[3].endswith("p1"), text
    out = kernel.ok("%jax_mesh mesh")
    text = out.displays[0]["data"]["text/plain"].splitlines()
    assert text[0] == "Mesh mesh data=2 (2 devices, 2 processes)", text
    assert text[1].split() == ["data=0", "data=1"] and text[2].split()[1] == "[p0]", text


CHATTY = """\
def chatty(config):
    import time, jax, jaxnb
    for step in range(1, 60):
        print(f"step {step} on p{jax.process_index()}", flush=True)
        jaxnb.report({"step": step})
        time.sleep(0.1)
"""


def test_prints_of_a_background_run_are_shown_while_it_runs(kernel, tmp_path):
    kernel.ok(CHATTY)
    msg_id = kernel.send(f"%jax_train chatty --background -o bg --storage {tmp_path}")
    kernel.collect(msg_id, timeout=60)  # the cell returns at once; the run goes on
    seen, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline and not any("on p1" in t for t in seen):
        try:
            msg = kernel.client.get_iopub_msg(timeout=0.5)
        except Exception:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            content = msg["content"]
            seen.append(content.get("text") or content.get("data", {}).get("text/plain", ""))
    assert any("[p1] step" in t and "on p1" in t for t in seen), seen[-5:]
    assert kernel.value("bg.running"), "the lines must arrive while the run goes on"
    kernel.ok("bg.wait(60)")
    assert kernel.value("bg.error is None and len(bg.history)") == 59


SELF_KILL = """\
%%jax_cluster
import os, signal, jax, jax.numpy as jnp
if jax.process_index() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
x = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(jnp.ones(jax.local_device_count()))
x.block_until_ready()
"""


def test_after_kill_9_only_this_cells_lines_are_quoted_and_the_survivor_is_stopped(kernel):
    """Last in the module: it breaks the group (restarted at the end)."""
    kernel.ok("%%jax_cluster\nimport os\nos.write(2, b'OLD-LOG-LINE from an earlier cell\\n')")
    out = kernel.run(SELF_KILL)
    assert out.error is not None and "[p1]" in out.error["evalue"], out.shown
    assert "was killed by SIGKILL" in out.traceback
    assert "OLD-LOG-LINE" not in out.traceback, out.traceback
    out = kernel.run("%%jax_cluster\n1")
    assert out.error is not None or "UsageError" in out.stderr, out.shown
    shown = out.shown
    assert "[p0]" in shown and "stopped by jaxnb" in shown, shown
    assert re.search(r"\[p0\] \(pid \d+ on \S+\) was stopped by jaxnb", shown), shown
    assert not re.search(r"\[p0\] \(pid \d+ on \S+\) was killed", shown), shown
    kernel.ok("%jax_cluster restart")


def test_platforms_and_flags_that_cannot_apply_are_one_line_before_anything_starts():
    """On a machine with no CUDA JAX that is no TPU VM (else skipped: the flags would apply)."""
    from jaxnb._hosts.platforms import cuda_jax_installed, local_tpu

    if cuda_jax_installed() or local_tpu():  # a GPU machine: --platform gpu would apply there
        pytest.skip("this test needs a machine with no CUDA JAX and no TPU")
    with started_kernel(None) as k:
        for flags, words in [
            ("--platform gpu", "--platform gpu: this notebook's JAX has no CUDA support"),
            ("--platform tpu", "--platform tpu: this machine is not a TPU VM"),
            ("-n 2 --python /usr/bin/python3", "--python is the interpreter on the hosts"),
            ("-n 2 --address 127.0.0.1", "--address is this machine's address for engines on other"),
        ]:
            line = usage_error(k.run(f"%jax_cluster start {flags}"))
            assert line.startswith(f"UsageError: {words}"), line
            assert not k.descendants(), "nothing may start"
        assert k.value("__import__('jaxnb').current_cluster() is None")


SCRIPT = """\
import jaxnb

def train(config):
    import jaxnb
    for step in range(3):
        jaxnb.report({"loss": 1.0 / (step + 1)})

with jaxnb.JaxCluster(1) as cluster:
    result = cluster.train(train, {"steps": 3}, storage=STORAGE)
    print("history", len(result.history))
"""


def test_train_in_a_plain_script_prints_text_not_mimebundles(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(SCRIPT.replace("STORAGE", repr(str(tmp_path / "runs"))))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "history 3" in out.stdout
    assert "jaxnb run train" in out.stdout and "status" in out.stdout, out.stdout
    for raw in ("{'text/html'", "application/vnd.jupyter", "<IPython.core.display"):
        assert raw not in out.stdout, out.stdout


def test_small_things_timeout_0_resume_checkpoint_grammar_and_temp_folders(tmp_path):
    with started_kernel(None) as k:
        out = k.ok("%jax_cluster start -n 1 --timeout 3")
        assert "1 process, 1 global device" in out.shown, out.shown
        assert k.value("repr(__import__('jaxnb').current_cluster())").startswith("<JaxCluster 1 process,")
        # --timeout 0 lifts the start-time timeout for one cell
        out = k.ok("%%jax_cluster --timeout 0\nimport time\ntime.sleep(4.5)\nprint('slept')")
        assert out.stdout == "slept\n"
        # a resumed run with nothing left to do keeps the checkpoint it resumed from
        k.ok("def ckpt(config):\n    import jaxnb\n    start = jaxnb.get_checkpoint()\n"
             "    for step in range(start.step + 1 if start else 1, config['steps'] + 1):\n"
             "        jaxnb.report({'step': step}, checkpoint={'x': step})\n")
        k.ok(f"%jax_train ckpt --config dict(steps=2) --storage {tmp_path} -o first")
        k.ok(f"%jax_train ckpt --config dict(steps=2) --storage {tmp_path} --resume -o again")
        assert k.value("[len(again.history), again.checkpoint.step]") == [0, 2]
        # a cut cell's full output folder lives until its own cluster stops
        out = k.ok("%%jax_cluster\nfor i in range(2500): print(i)")
        note = re.search(r"each process's full output: (\S+)/p\*", out.stdout)
        assert note, out.stdout[:300]
        other = k.ok("other = __import__('jaxnb').JaxCluster(n=1, spares=0)\nother.start()\n"
                     "other.run('for i in range(2500): print(i)')")
        other_note = re.search(r"each process's full output: (\S+)/p\*", other.stdout)
        assert other_note and other_note[1] != note[1], other.stdout[:300]
        assert k.value(f"__import__('os').path.isdir({note[1]!r})")
        k.ok("%jax_cluster stop")
        assert not k.value(f"__import__('os').path.isdir({note[1]!r})")
        assert k.value(f"__import__('os').path.isdir({other_note[1]!r})")  # not the other's
        k.ok("other.stop()")
        assert not k.value(f"__import__('os').path.isdir({other_note[1]!r})")


LEAF_ERROR = """\
def bad_leaf(config):
    import jaxnb
    jaxnb.report({"step": 1}, checkpoint={"f": open})
"""


def test_a_leaf_error_is_its_one_line_not_jaxnbs_frames(kernel, tmp_path):
    kernel.ok(LEAF_ERROR)
    out = kernel.run(f"%jax_train bad_leaf --storage {tmp_path}")
    assert out.error is not None and out.error["ename"] == "RemoteError", out.shown
    assert out.error["evalue"].startswith("LeafError: checkpoint leaf ['f'] is"), out.error["evalue"]
    tb = out.traceback
    assert tb.splitlines()[0].startswith("RemoteError: LeafError: checkpoint leaf ['f'] is"), tb
    for word in (*NOT_OURS, "checkpoint/leaves.py", "checkpoint/store.py"):
        assert word not in tb, tb
    assert 'jaxnb.report({"step": 1}, checkpoint={"f": open})' in tb, tb
    assert len(tb.splitlines()) < 25, tb


NOISE = """\
%%jax_cluster
import ctypes, warnings, jax, jax.numpy as jnp
print('before')
warnings.warn('careful')
x = jax.pmap(lambda v: jax.lax.psum(v, 'i'), axis_name='i')(jnp.ones(jax.local_device_count()))
flushed = ctypes.CDLL(None).fflush(None)  # gloo's C++ lines wait in C's stdio buffer until then
print('same after', float(x[0]))
print('again the same')
"""


def test_gloo_lines_and_warnings_do_not_split_identical_lines(kernel):
    """Its own cluster (2 processes of 2 devices: gloo connects, in any order); last in the module.
    Each engine's warning path holds its pid."""
    kernel.ok("%jax_cluster stop")
    kernel.ok("%jax_cluster start -n 2 --devices-per-process 2")
    out = kernel.ok(NOISE)
    lines = out.stdout.splitlines() + out.stderr.splitlines()
    assert not [x for x in lines if x.startswith("[p")], out.shown
    assert out.stdout.count("same after 4.0") == 1 and out.stdout.count("again the same") == 1, out.shown
    assert sum("UserWarning: careful" in x for x in lines) == 1, out.shown
    # gloo's lines reach the cell only sometimes (when the engine forwards them in time): at most once
    assert sum(x.startswith("[Gloo]") for x in lines) <= 1, out.shown
