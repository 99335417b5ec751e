"""JaxCluster on real engines: devices, SPMD output merging, errors, values, Kubeflow variables."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from jaxnb import RemoteError

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


def test_processes_are_ordered_by_jax_process_index(cluster):
    procs = cluster.status()
    assert [p.process_index for p in procs] == [0, 1]
    assert len({p.pid for p in procs}) == 2
    assert all(p.platform == "cpu" and p.global_device_count == 2 for p in procs)
    assert all(p.state == "idle" for p in procs)
    cluster.run("import jax\n_index = jax.process_index()")
    assert cluster.pull("_index") == 0


def test_identical_output_is_shown_once(cluster, capsys):
    cluster.run("print('hello from every process')")
    assert capsys.readouterr().out == "hello from every process\n"


def test_differing_output_is_labelled_by_process(cluster, capsys):
    cluster.run("import jax\nprint('same')\nprint('I am', jax.process_index())")
    out = capsys.readouterr().out
    assert out == "same\n[p0] I am 0\n[p1] I am 1\n"


def test_all_and_single_process_views(cluster, capsys):
    code = "import jax\nprint('I am', jax.process_index())"
    cluster.run(code, all=True)
    assert capsys.readouterr().out == "[p0]\nI am 0\n[p1]\nI am 1\n"
    cluster.run(code, process=1)
    assert capsys.readouterr().out == "[p1]\nI am 1\n"
    with pytest.raises(ValueError, match="process=5 does not exist"):
        cluster.run(code, process=5)


def test_error_on_one_process_names_it(cluster):
    with pytest.raises(RemoteError) as info:
        cluster.run("import jax\nif jax.process_index() == 1:\n    raise ValueError('bad shard')")
    err = info.value
    assert err.processes == [1]
    assert "ValueError: bad shard" in str(err) and "[p1]" in str(err)
    assert len(err.tracebacks) == 1
    cluster.group.suspect = None


def test_same_error_everywhere_is_shown_once(cluster):
    with pytest.raises(RemoteError) as info:
        cluster.run("1 / 0")
    assert info.value.processes == [0, 1]
    assert len(info.value.tracebacks) == 1
    assert "[p0], [p1]" in info.value.tracebacks[0]


def test_syntax_error_is_reported_once_without_running(cluster, capsys):
    with pytest.raises(SyntaxError):
        cluster.run("print('ran')\ndef broken(:\n")
    assert "ran" not in capsys.readouterr().out


def test_streams_appear_while_the_cell_runs(cluster, monkeypatch):
    seen: list[tuple[float, str]] = []

    class Recorder:
        def write(self, text: str) -> None:
            seen.append((time.monotonic(), text))

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Recorder())
    cluster.run("import time\nprint('early', flush=True)\ntime.sleep(2)\nprint('late')")
    end = time.monotonic()
    early = [t for t, text in seen if "early" in text]
    assert early and end - early[0] > 1.0, seen


def test_pull_gathers_a_global_array(cluster):
    cluster.run(
        "import jax, numpy as np\n"
        "from jax.sharding import NamedSharding, PartitionSpec as P\n"
        "mesh = jax.make_mesh((2,), ('x',))\n"
        "g = jax.make_array_from_process_local_data(\n"
        "    NamedSharding(mesh, P('x')), np.arange(3.0) + 10 * jax.process_index())\n"
        "obj = {'from': jax.process_index()}\n"
    )
    g = cluster.pull("g")
    assert isinstance(g, np.ndarray)
    np.testing.assert_array_equal(g, [0, 1, 2, 10, 11, 12])
    assert cluster.pull("obj") == {"from": 0}


def test_a_scripts_unnamed_cluster_cannot_be_detached_and_says_how(cluster):
    from jaxnb import ClusterStateError

    with pytest.raises(ClusterStateError, match=r"^this cluster ends with its process \(started by a "
                       r"script\); give it a name to detach it later: "
                       r"`JaxCluster\(name=NAME\)` or `%jax_cluster start --name NAME`$"):
        cluster.detach()
    assert cluster.running and cluster.run("1 + 1", value=True).value == 2  # nothing changed


def test_pull_of_an_unknown_name_says_so(cluster):
    with pytest.raises(NameError, match="not defined on any process"):
        cluster.pull("no_such_name_anywhere")


def test_push_sends_a_value_to_every_process(cluster, capsys):
    cluster.push(factor=7)
    cluster.run("import jax\nprint(factor * (jax.process_index() + 1))")
    assert capsys.readouterr().out == "[p0] 7\n[p1] 14\n"


def test_kubeflow_variables_are_set(cluster, capsys):
    cluster.run(
        "import os\nprint(os.environ['JAX_NUM_PROCESSES'], os.environ['JAX_PROCESS_ID'],"
        " os.environ['JAX_COORDINATOR_ADDRESS'])"
    )
    out = capsys.readouterr().out
    address = cluster.coordinator_address
    assert out == f"[p0] 2 0 {address}\n[p1] 2 1 {address}\n"


def test_context_matches_ray_train(cluster, capsys):
    cluster.run(
        "import jaxnb\nctx = jaxnb.get_context()\n"
        "print(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(),"
        " ctx.get_local_world_size(), ctx.process_index, ctx.num_processes)"
    )
    assert capsys.readouterr().out == "[p0] 0 2 0 2 0 2\n[p1] 1 2 1 2 1 2\n"


def test_psum_across_processes(cluster, capsys):
    cluster.run(
        "import jax, jax.numpy as jnp\n"
        "from jax.experimental import multihost_utils\n"
        "total = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1])).sum()\n"
        "print(int(total))"
    )
    assert capsys.readouterr().out == "3\n"
