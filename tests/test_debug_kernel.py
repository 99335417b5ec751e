"""The debugger where users meet it: a real Jupyter kernel whose front end answers the input
prompt (``tests/support/kernel_harness.py``), on a real 2-process cluster.

Post-mortem on the process that failed; ``jaxnb.breakpoint()`` in a training function with
``all:`` and ``p1:`` commands, then ``c``; a breakpoint that outlasts ``--timeout``; an interrupt
at the prompt; headless (no stdin); bad input, one line each.
"""

from __future__ import annotations

import re

import pytest
from support.kernel_checks import usage_error
from test_debug import FAILS_ON_P1 as FAILING_CELL

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

FAILS_ON_P1 = "%%jax_cluster\n" + FAILING_CELL

TRAIN = """\
def train(config):
    import jax.numpy as jnp
    import jaxnb
    params = {"w": jnp.ones((4, 2))}
    for step in range(4):
        loss = 1.0 / (step + 1)
        if step == 2:
            jaxnb.breakpoint()
        jaxnb.report({"step": step, "loss": loss})
"""

STOPS = """%%jax_cluster --timeout 3
import time, jax
r = jax.process_index()
jaxnb.breakpoint()
print('after', r)"""



@pytest.fixture(scope="module")
def kernel(make_kernel):
    return make_kernel("-n 2 --spares 0", "%%jax_cluster\nimport jaxnb")


def test_post_mortem_on_p1_at_the_notebooks_prompt(kernel):
    out = kernel.run(FAILS_ON_P1)
    assert out.error is not None and "only p1 (on process [p1])" in out.error["evalue"]
    out = kernel.run("%jax_debug", answers=["p v", "y", "up", "p x", "w", "nope", "q"])
    assert out.error is None and out.status == "ok", out.shown
    assert out.prompts == ["(jaxnb p1) "] * 7
    lines = out.stdout.splitlines()
    assert lines[0] == "jaxnb: post-mortem of [p1]: ValueError: only p1", out.stdout
    assert re.fullmatch(r"> Cell In\[\d+\], line 6, in scale", lines[1]), lines
    assert lines[2] == "-> raise ValueError('only p1')"
    answers = lines[3:]
    assert answers[:2] == ["3", "6"], answers  # p v, y
    assert re.fullmatch(r"> Cell In\[\d+\], line 8", answers[2]), answers  # up
    assert answers[4].startswith("Array(shape=(8, 4), dtype=float32, sharding=cpu:"), answers
    assert "*** NameError: name 'nope' is not defined" in answers


def test_a_breakpoint_in_a_training_function_on_two_processes(kernel, tmp_path):
    kernel.ok(TRAIN)
    out = kernel.run(f"%jax_train train --storage {tmp_path} -o run",
                     answers=["all: p step", "p r if False else loss", "p1: p loss",
                              "all: p params", "c"])
    assert out.error is None, out.shown
    assert out.prompts == ["(jaxnb p0,p1) "] * 5
    text = out.stdout
    stopped = re.search(r"jaxnb: \[p0\], \[p1\] stopped at jaxnb.breakpoint\(\), "
                        r"Cell In\[\d+\], line 8, in train: jaxnb.breakpoint\(\)", text)
    assert stopped, text
    after = text[stopped.end():]
    assert "\n2\n0.3333333333333333\n0.3333333333333333\n" in after, after  # identical: once
    assert after.count("{'w': Array(shape=(4, 2), dtype=float32, sharding=cpu:") == 2  # differ: labelled
    assert "[p0] {'w': Array" in after and "[p1] {'w': Array" in after
    assert kernel.value("[h['step'] for h in run.history]") == [0, 1, 2, 3]  # c resumed both
    headless = kernel.ok(f"%jax_train train --storage {tmp_path} --name again").stdout
    assert "did not stop [p0], [p1]: no input prompt here" in headless, headless


def test_a_breakpoint_outlasts_the_timeout_and_c_resumes_every_process(kernel):
    out = kernel.run(STOPS, answers=["all: time.sleep(4)", "p r", "c"])
    assert out.error is None, out.shown
    assert "timeout" not in out.stdout + out.stderr, out.shown
    assert "[p0] 0\n[p1] 1\n" in out.stdout
    assert "[p0] after 0\n[p1] after 1\n" in out.stdout


def test_an_interrupt_at_the_prompt_ends_the_session_and_the_cell(kernel):
    msg_id = kernel.send(STOPS.replace("--timeout 3", ""), stdin=True)
    out = kernel.collect(msg_id, answers=["p r"])
    assert out.prompting and len(out.prompts) == 2, out.shown
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=60)
    assert out.error is not None and out.error["ename"] == "KeyboardInterrupt", out.shown
    assert "after" not in out.stdout
    again = kernel.ok("%%jax_cluster\nprint('usable', r)")
    assert "[p0] usable 0" in again.stdout and "[p1] usable 1" in again.stdout


def test_an_interrupt_at_a_training_runs_prompt_ends_the_run(kernel, tmp_path):
    kernel.ok(TRAIN)
    msg_id = kernel.send(f"%jax_train train --storage {tmp_path} --name stopped -o stopped",
                         stdin=True)
    out = kernel.collect(msg_id, answers=[])
    assert out.prompting, out.shown
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=60)
    assert "jaxnb: interrupted at jaxnb.breakpoint(): interrupting every process" in out.stderr
    assert out.error is not None and "KeyboardInterrupt" in out.error["evalue"], out.shown
    assert kernel.value("[h['step'] for h in stopped.history]") == [0, 1]
    assert "usable" in kernel.ok("%%jax_cluster\nprint('usable')").stdout


def test_headless_a_breakpoint_is_one_note_and_no_stop(kernel):
    out = kernel.ok(STOPS)  # the harness's requests take no input, as papermill's
    notes = [line for line in out.stdout.splitlines() if "jaxnb.breakpoint()" in line]
    assert len(notes) == 1 and "did not stop [p0], [p1]: no input prompt here" in notes[0], out.stdout
    assert "[p0] after 0\n[p1] after 1\n" in out.stdout


def test_bad_input_is_one_line_each(kernel):
    kernel.run(FAILS_ON_P1)
    said = usage_error(kernel.run("%jax_debug --process 0"))
    assert said == "UsageError: [p0] did not fail in its last cell or run; [p1] did: --process 1"
    said = usage_error(kernel.run("%jax_debug"))  # no input prompt here
    assert said.startswith("UsageError: no input prompt here") and '-c "p x; w"' in said
    kernel.ok("%%jax_cluster\nz = 1")
    said = usage_error(kernel.run("%jax_debug", answers=[]))
    assert said.startswith("UsageError: nothing is left to debug: a cell ran on ") and "[p1]" in said
    said = usage_error(kernel.run("%jax_debug --procss 1"))
    assert "unrecognized arguments: --procss 1" in said


VARIABLES = """%%jax_cluster
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("data",))
def replicated(x):
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P()), np.asarray(x, np.float32))
params = {"w": replicated(np.ones((4, 2))), "b": replicated(np.zeros(2))}
diverged = {"w": replicated(np.ones((4, 2)) + 0.5 * jax.process_index()), "b": replicated(np.zeros(2))}"""


def test_jax_who_and_jax_diff_on_replicated_and_diverged_parameters(kernel):
    kernel.ok(VARIABLES)
    table = kernel.ok("%jax_who").stdout.splitlines()
    assert table[0].split() == ["name", "type", "shape", "dtype", "sharding", "bytes", "same", "on",
                                "every", "process?"], table
    rows = {line.split()[0]: line for line in table[1:]}
    assert rows["params"].split()[1:] == ["dict", "(2", "leaves)", "—", "float32", "P()", "40", "B", "yes"]
    assert rows["diverged"].endswith("no: [p1] differs"), rows
    assert "np" not in rows and "jax" not in rows
    same = kernel.ok("%jax_diff params").stdout
    assert same == "params: the same on every process (compared by fingerprint)\n"
    shown = kernel.ok("%jax_diff diverged").stdout.splitlines()
    assert shown[0] == "diverged: 1 leaf not the same on every process"
    assert shown[2].split() == ["['w']", "block", "[0:4,", "0:2]", "[p1]", "differs", "from", "[p0]", "0.5"]
    said = usage_error(kernel.run("%jax_diff"))
    assert said == "UsageError: %jax_diff takes one NAME or expression; e.g. %jax_diff params"
    said = usage_error(kernel.run("%jax_diff nope"))
    assert said.startswith("UsageError: name 'nope' is not defined on the engines")
    assert usage_error(kernel.run("%jax_who x")).startswith("UsageError: %jax_who takes nothing")
