"""The debugger through the Python API on real engines: post-mortem (``JaxCluster.debug``) of a
cell and of a training run that failed on one process, its bad input, and the frames dropped by
the next cell. (The same at a real kernel's input prompt: ``test_debug_kernel.py``.)"""

from __future__ import annotations

import pytest

import jaxnb
from jaxnb import ClusterStateError

#: Starts engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

FAILS_ON_P1 = """\
import jax, jax.numpy as jnp
x = jnp.zeros((8, 4))
def scale(v):
    y = v * 2
    if jax.process_index() == 1:
        raise ValueError('only p1')
    return y
scale(3)
"""


def lost_loader(config):
    """Process 1 raises at step 3; process 0 stops at should_stop()."""
    import jax.numpy as jnp

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    params = {"w": jnp.ones((4, 2))}
    for step in range(1, 1000):
        batch = step * 10
        if rank == 1 and step == 3:
            raise RuntimeError(f"lost the data loader at batch {batch}")
        jaxnb.report({"step": step})
        if jaxnb.should_stop():
            return params


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """This module's own cluster: its cells fail on purpose."""
    return make_cluster()


def test_post_mortem_of_a_cell_that_failed_only_on_p1(cluster, capsys):
    with pytest.raises(jaxnb.RemoteError):
        cluster.run(FAILS_ON_P1)
    capsys.readouterr()
    cluster.debug(commands="p v; y; up; p x; w; l")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "jaxnb: post-mortem of [p1]: ValueError: only p1", out
    assert lines[1].startswith("> Cell In[") and lines[1].endswith("], line 6, in scale"), out
    assert lines[2] == "-> raise ValueError('only p1')"
    assert "(jaxnb p1) p v\n3\n" in out
    assert "(jaxnb p1) y\n6\n" in out
    assert "(jaxnb p1) p x\nArray(shape=(8, 4), dtype=float32, sharding=cpu:" in out
    where = out.split("(jaxnb p1) w\n")[1].split("(jaxnb p1) l\n")[0].splitlines()
    assert where[0].startswith("> Cell In[") and where[0].endswith("line 8"), where  # after `up`
    assert where[2].startswith("  Cell In[") and where[2].endswith("line 6, in scale"), where
    assert "  8  ->\tscale(3)" in out


def test_bad_input_is_one_line_each(cluster, capsys):
    with pytest.raises(jaxnb.RemoteError):
        cluster.run(FAILS_ON_P1)
    with pytest.raises(ValueError) as not_failed:
        cluster.debug(process=0, commands="p x")
    assert str(not_failed.value) == "[p0] did not fail in its last cell or run; [p1] did: process=1"
    with pytest.raises(ValueError) as missing:
        cluster.debug(process=7, commands="p x")
    assert str(missing.value) == "process=7 does not exist; choose 0..1"
    with pytest.raises(ValueError) as headless:
        cluster.debug()
    assert "\n" not in str(headless.value) and "commands='p x; w'" in str(headless.value)
    capsys.readouterr()
    cluster.debug(commands="n; nope; p3: p x")
    answers = capsys.readouterr().out.split("(jaxnb p1) ")[1:]
    assert [a.count("\n") for a in answers] == [2, 2, 2], answers  # the command line, one answer
    assert "does not step" in answers[0] and "NameError: name 'nope'" in answers[1]
    assert "[p3] is not in this session" in answers[2]


def test_after_the_next_cell_nothing_is_left_to_debug(cluster, capsys):
    with pytest.raises(jaxnb.RemoteError):
        cluster.run(FAILS_ON_P1)
    cluster.run("z = 1")
    with pytest.raises(ClusterStateError) as nothing:
        cluster.debug()
    said = str(nothing.value)
    assert said.startswith("nothing is left to debug: a cell ran on [p1] after the failure")
    assert "\n" not in said


def test_post_mortem_of_a_training_run(cluster, tmp_path, capsys):
    with pytest.raises(jaxnb.RemoteError):
        cluster.train(lost_loader, {}, storage=str(tmp_path))
    capsys.readouterr()
    cluster.debug(commands="p batch; p step; p params")
    out = capsys.readouterr().out
    assert out.startswith("jaxnb: post-mortem of [p1]: RuntimeError: lost the data loader at batch 30")
    assert out.splitlines()[1].endswith(", in lost_loader"), out
    assert "(jaxnb p1) p batch\n30\n(jaxnb p1) p step\n3\n" in out
    assert "{'w': Array(shape=(4, 2), dtype=float32, sharding=cpu:" in out
    cluster.run("z = 2")  # the next cell drops the run's frames too
    with pytest.raises(ClusterStateError):
        cluster.debug()


VARIABLES = """\
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("data",))
def replicated(x):
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P()), np.asarray(x, np.float32))
me = jax.process_index()
params = {"w": replicated(np.ones((4, 2))), "b": replicated(np.zeros(2)), "step": 3}
diverged = {"w": replicated(np.ones((4, 2)) + 0.25 * me), "b": replicated(np.zeros(2)),
            "step": 3 + me, "opt": "adam"}
ragged = np.zeros(3 + me)
sharded = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("data")))
lr = 0.1
"""


def test_who_tells_replicated_from_diverged_values(cluster):
    cluster.run(VARIABLES)
    rows = {row["name"]: row for row in cluster.who()}
    assert {"jax", "jnp", "np", "Mesh", "P"}.isdisjoint(rows)  # modules and what they define
    assert rows["params"] == {"name": "params", "type": "dict (3 leaves)", "shape": None,
                              "dtype": "float32", "sharding": "P()", "bytes": 68, "same": "yes",
                              "differing": []}
    assert rows["diverged"]["same"] == "no: [p1] differs" and rows["diverged"]["differing"] == [1]
    assert rows["lr"]["same"] == "yes" and rows["me"]["same"] == "no: [p1] differs"
    assert rows["ragged"]["same"] == "no: [p1] holds another type or shape"
    assert rows["sharded"]["same"].startswith("— (sharded")
    assert rows["sharded"]["shape"] == [8] and rows["sharded"]["sharding"] == "P('data',)"
    assert rows["replicated"]["same"] == "—"  # a function: not compared


def test_diff_lists_the_leaves_that_differ_and_by_how_much(cluster):
    from jaxnb._debug.compare import diff_text

    cluster.run(VARIABLES)
    assert cluster.diff("params") == []
    rows = {row["path"]: row for row in cluster.diff("diverged")}
    assert set(rows) == {"['w']", "['step']"}, rows
    assert rows["['w']"]["differing"] == [1] and rows["['w']"]["reference"] == 0
    assert rows["['w']"]["block"] == "[0:4, 0:2]" and rows["['w']"]["largest"] == 0.25
    assert rows["['step']"]["largest"] == 1 and rows["['step']"]["note"] == "p0: 3, p1: 4"
    text = diff_text("diverged", cluster.diff("diverged")).splitlines()
    assert text[0] == "diverged: 2 leaves not the same on every process"
    assert text[2].split() == ["['step']", "[p1]", "differs", "from", "[p0]", "1", "(p0:", "3,", "p1:", "4)"]
    (ragged,) = cluster.diff("ragged")
    assert ragged["note"] == "shapes differ: p0 (3,) <f8, p1 (4,) <f8" and ragged["largest"] is None
    assert cluster.diff("diverged['w']")[0]["largest"] == 0.25  # an expression
    with pytest.raises(NameError, match="name 'nope' is not defined on the engines"):
        cluster.diff("nope")


ONLY_P0_STOPS = """\
import time, jax, jaxnb
r = jax.process_index()
if r == 0:
    jaxnb.breakpoint()
else:
    time.sleep(1.5)
print('after', r)
"""


def test_the_stopped_and_the_others_are_named_and_no_divergence_is_declared(cluster, capsys):
    cluster.debug(commands="p r; all: __import__('time').sleep(4); c")  # longer than the grace
    capsys.readouterr()
    cluster.run(ONLY_P0_STOPS, timeout=3)  # and longer than the timeout
    out = capsys.readouterr().out
    assert "jaxnb: [p0] stopped at jaxnb.breakpoint(), Cell In[" in out, out
    assert "line 4: jaxnb.breakpoint()" in out
    assert "jaxnb: not stopped: [p1] at cell line 6: time.sleep(1.5)" in out, out
    assert "(jaxnb p0) p r\n0\n" in out and "(jaxnb p0) c\n" in out
    assert "[p0] after 0" in out and "[p1] after 1" in out


def stops_in_the_background(config):
    import jaxnb

    for step in range(3):
        if step == 1:
            jaxnb.breakpoint()
        jaxnb.report({"step": step})


def test_a_background_run_passes_its_breakpoint_with_a_note(cluster, tmp_path, capsys):
    result = cluster.train(stops_in_the_background, {}, storage=str(tmp_path), background=True)
    result.wait(120)
    assert result.error is None and [h["step"] for h in result.history] == [0, 1, 2]
    out = capsys.readouterr().out
    assert "did not stop [p0], [p1]: no input prompt here (headless, or a --background run)" in out


def test_q_at_a_breakpoint_ends_the_cell_on_every_stopped_process(cluster, capsys):
    cluster.debug(commands="q")
    with pytest.raises(jaxnb.RemoteError) as ended:
        cluster.run("import jaxnb\njaxnb.breakpoint()\nprint('not reached')")
    assert ended.value.summary == ("BdbQuit: q in jaxnb's debugger ended the cell "
                                   "(on processes [p0], [p1])")
    assert "not reached" not in capsys.readouterr().out
    cluster.run("print('usable')")


def test_without_the_control_hook_breakpoints_refuse_in_one_line_and_nothing_stays_stopped(
        cluster, capsys):
    """An ipykernel whose control channel jaxnb cannot serve (``hooks.control_ready`` is what
    installing the hook found): ``%jax_debug -c`` refuses, and ``jaxnb.breakpoint()`` goes on."""
    cluster.run("import jaxnb._engine.debug.hooks as hooks\nhooks.control_ready = False")
    try:
        with pytest.raises(ClusterStateError) as refused:
            cluster.debug(commands="p 1")
        message = str(refused.value)
        assert message.startswith("jaxnb.breakpoint() cannot stop [p0], [p1]: their ipykernel")
        assert "\n" not in message
        capsys.readouterr()
        cluster.run("import jaxnb\nfor i in range(3):\n    jaxnb.breakpoint()\nprint('went on', i)",
                    timeout=60)
        shown = capsys.readouterr()
        assert "went on 2" in shown.out
        said = [line for line in (shown.out + shown.err).splitlines() if "not stopping" in line]
        assert len(said) == 1 and "cannot take the debugger's commands" in said[0], said
    finally:
        cluster.run("hooks.control_ready = True")
