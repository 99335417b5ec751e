"""``%jax_train`` / ``JaxCluster.train`` on two real JAX processes (ipyparallel engines)."""

from __future__ import annotations

import _thread
import time

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from support.clusters import on_flag, wait_until

from jaxnb import ClusterStateError, RemoteError, Result
from jaxnb.magics import use_cluster

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """This module's own cluster: its tests interrupt, fail and restart it."""
    return make_cluster()


@pytest.fixture(scope="module")
def ip(cluster):
    from support.clusters import real_shell

    shell = real_shell()
    shell.run_line_magic("load_ext", "jaxnb")
    use_cluster(cluster, shell)
    types = shell.display_formatter.active_types
    shell.display_formatter.active_types = [*types, "text/html"]  # as in a notebook kernel
    yield shell
    shell.display_formatter.active_types = types
    use_cluster(None, shell)  # the module's cluster fixture stops it


# ---- functions that run on the engines --------------------------------------------------


def tight_loop(config):
    import jaxnb

    for i in range(config["n"]):
        jaxnb.report({"i": i, "p": jaxnb.get_context().get_world_rank()})


def ray_style_own_checkpoints(config):
    """Ray's own-directory pattern: ``Checkpoint.from_directory`` and ``as_directory``."""
    import json
    import os

    import jaxnb as train  # was: from ray import train
    from jaxnb import Checkpoint  # was: from ray.train import Checkpoint

    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["done"]
    for step in range(start, start + config["steps"]):
        saved = None
        if (step + 1) % 2 == 0:
            folder = os.path.join(config["dir"], str(step + 1))
            if train.get_context().get_world_rank() == 0:
                os.makedirs(folder)
                with open(os.path.join(folder, "state.json"), "w") as f:
                    json.dump({"done": step + 1}, f)
            saved = Checkpoint.from_directory(folder)
        train.report({"step": step + 1, "start": start}, checkpoint=saved)


def ray_train_func(config):
    """Ray Train's JAX quickstart loop with ``ray.train.report`` → ``jaxnb.report``."""
    import jax
    import jax.numpy as jnp
    import optax

    import jaxnb as train  # was: from ray import train

    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (128, 1))
    y = 3.0 * x + 2.0
    params = {"w": jnp.zeros((1, 1)), "b": jnp.zeros((1,))}
    optimizer = optax.adam(config.get("lr", 0.1))
    opt_state = optimizer.init(params)

    def loss_fn(params, x, y):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    for epoch in range(config["epochs"]):
        params, opt_state, loss = step(params, opt_state, x, y)
        train.report({"loss": float(loss), "epoch": epoch})
    if "names" in config:  # what Ray's context would say of the run
        import os

        context = train.get_context()
        with open(os.path.join(config["names"], str(context.get_world_rank())), "w") as f:
            f.write(context.get_experiment_name())


def until_stopped(config=None):
    """Report a step at a time until asked to stop; with ``config["flag"]``, write that file at
    step 5 (the run is under way)."""
    import time

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    step = 0
    while not jaxnb.should_stop():
        step += 1
        jaxnb.report({"step": step})
        if config and step == 5 and rank == 0:
            open(config["flag"], "a").close()
        time.sleep(0.002 if rank == 0 else 0.006)  # processes out of step on purpose
        if step > 20_000:
            raise RuntimeError("never asked to stop")


def fails_on(config):
    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    for i in range(10):
        jaxnb.report({"i": i})
        if rank == config["who"] and i == 5:
            raise ValueError(f"boom on {rank}")
        if jaxnb.should_stop():
            return


def sharded_counter(config):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxnb

    mesh = jax.make_mesh((jax.device_count(),), ("x",), devices=jax.devices())
    sharding = NamedSharding(mesh, P("x"))
    n = 4 * jax.device_count()
    ckpt = jaxnb.get_checkpoint()
    if ckpt is None:
        w = jax.make_array_from_callback((n,), sharding, lambda i: np.zeros(n, np.float32)[i])
        start = 0
    else:
        target = {"w": jax.ShapeDtypeStruct((n,), jnp.float32, sharding=sharding), "step": 0}
        state = ckpt.restore(target)
        w, start = state["w"], int(state["step"])
        assert start == ckpt.step, (start, ckpt.step)
        assert w.sharding == sharding
        assert float(jnp.sum(w)) == n * start  # every element counted `start` steps
    bump = jax.jit(lambda w: w + 1)
    for step in range(start + 1, start + 1 + config["steps"]):
        w = bump(w)
        jaxnb.report({"step": step, "total": jnp.sum(w)},
                     checkpoint={"w": w, "step": step} if step % 2 == 0 else None)


# ---- tests ------------------------------------------------------------------------------


def test_lossless_history_of_a_tight_loop(cluster, tmp_path):
    n = 30_000
    result = cluster.train(tight_loop, {"n": n}, storage=tmp_path)
    assert isinstance(result, Result) and result.error is None
    assert [h["i"] for h in result.history] == list(range(n))
    assert all(h["p"] == 0 for h in result.history)
    assert result.reports == {0: n, 1: n}
    assert result.metrics == {"i": n - 1, "p": 0}
    assert result.path == str(tmp_path / "tight_loop")


def test_ray_quickstart_port(cluster, tmp_path):
    names = tmp_path / "names"
    names.mkdir()
    result = cluster.train(ray_train_func, {"epochs": 60, "lr": 0.1, "names": str(names)},
                           storage=tmp_path, name="quick")
    assert {p.name: p.read_text() for p in names.iterdir()} == {"0": "quick", "1": "quick"}
    after = cluster.run("import jaxnb\njaxnb.get_context().get_experiment_name()", value=True)
    assert after.value == ""  # no run goes on
    assert [h["epoch"] for h in result.history] == list(range(60))
    losses = [h["loss"] for h in result.history]
    assert all(isinstance(v, float) for v in losses)
    assert losses[-1] < 0.05 * losses[0]
    assert result.metrics["epoch"] == 59 and result.checkpoint is None


def test_ray_style_directory_checkpoints_resume(cluster, tmp_path):
    config = {"steps": 5, "dir": str(tmp_path / "saved_by_user")}
    first = cluster.train(ray_style_own_checkpoints, config, name="own", storage=tmp_path)
    assert first.checkpoint.step == 4 and first.checkpoint.user_managed
    assert first.checkpoint.path == str(tmp_path / "own" / "reported" / "4")  # copied, as Ray does
    with pytest.raises(FileExistsError, match="resume=True"):
        cluster.train(ray_style_own_checkpoints, config, name="own", storage=tmp_path)
    again = cluster.train(ray_style_own_checkpoints, {**config, "steps": 3}, name="own",
                          storage=tmp_path, resume=True)
    assert [(h["step"], h["start"]) for h in again.history] == [(5, 4), (6, 4), (7, 4)]
    assert again.checkpoint.step == 6


def test_zero_and_one_argument_functions_and_config(cluster, tmp_path):
    cluster.run(
        "import jaxnb\n"
        "def no_args():\n    jaxnb.report({'a': 1})\n"
        "def with_default(config=None):\n    jaxnb.report({'got': config})\n"
        "def own_checkpoint(config):\n    jaxnb.report({'a': 2}, checkpoint=config['dir'])\n"
    )
    assert cluster.train("no_args", storage=tmp_path).history == [{"a": 1}]
    assert cluster.train("with_default", storage=tmp_path).history == [{"got": None}]
    result = cluster.train("with_default", {"lr": 0.5, "layers": [1, 2]}, storage=tmp_path)
    assert result.history == [{"got": {"lr": 0.5, "layers": [1, 2]}}]
    (tmp_path / "own_checkpoint" / "mine").mkdir(parents=True)  # in the run folder: kept there
    mine = cluster.train("own_checkpoint", {"dir": str(tmp_path / "own_checkpoint" / "mine")},
                         storage=tmp_path)
    assert mine.checkpoint.path == str(tmp_path / "own_checkpoint" / "mine")
    assert mine.checkpoint.user_managed
    assert mine.checkpoint.step == 1
    with pytest.raises(ValueError, match="takes no arguments"):
        cluster.train("no_args", {"x": 1}, storage=tmp_path)
    with pytest.raises(ValueError, match="defined neither"):
        cluster.train("missing_function", storage=tmp_path)


def test_notebook_defined_function_uses_notebook_and_engine_names(ip, cluster, tmp_path):
    cluster.run("ENGINE_OFFSET = 1000")
    ip.run_cell(
        "import jaxnb\n"
        "SCALE = 3\n"
        "def helper(i):\n    return SCALE * i\n"
        "def nb_train(config):\n"
        "    for i in range(config['n']):\n"
        "        jaxnb.report({'v': helper(i) + ENGINE_OFFSET})\n"
    )
    out = ip.run_line_magic(
        "jax_train", f"nb_train --config {{'n': 4, 'tag': 'a b'}} -o res --storage {tmp_path}")
    assert out is ip.user_ns["res"]
    assert [h["v"] for h in out.history] == [1000, 1003, 1006, 1009]
    assert out.path == str(tmp_path / "nb_train")


def test_checkpoint_and_resume_with_sharded_arrays(cluster, tmp_path):
    first = cluster.train(sharded_counter, {"steps": 6}, name="counter", storage=tmp_path)
    assert first.error is None and first.checkpoint.step == 6
    n = 4 * cluster.num_processes
    assert [h["total"] for h in first.history] == [float(n * s) for s in range(1, 7)]
    assert sorted(int(d.name) for d in (tmp_path / "counter" / "checkpoints").iterdir()
                  if d.name.isdigit()) == [2, 4, 6]
    with pytest.raises(FileExistsError, match="resume=True"):
        cluster.train(sharded_counter, {"steps": 2}, name="counter", storage=tmp_path)
    again = cluster.train(sharded_counter, {"steps": 4}, name="counter", storage=tmp_path,
                          resume=True)
    assert again.error is None
    assert [h["step"] for h in again.history] == [7, 8, 9, 10]
    assert again.history[0]["total"] == float(n * 7)
    assert again.checkpoint.step == 10 and again.checkpoint.path.endswith("10")


def test_interrupt_stops_every_process_at_the_same_step(cluster, tmp_path):
    flag = tmp_path / "under_way"
    on_flag(flag, _thread.interrupt_main)
    result = cluster.train(until_stopped, {"flag": str(flag)}, storage=tmp_path)
    assert result.error is None and result.stopped
    assert result.reports[0] == result.reports[1] > 0
    assert [h["step"] for h in result.history] == list(range(1, result.reports[0] + 1))
    assert cluster.busy_with is None


@pytest.mark.parametrize("who", [0, 1])
def test_error_on_one_process_names_it_and_keeps_history(cluster, tmp_path, who):
    stored = []
    with pytest.raises(RemoteError) as info:
        cluster.train(fails_on, {"who": who}, storage=tmp_path, on_result=stored.append)
    assert info.value.processes == [who]
    assert f"ValueError: boom on {who} (on process [p{who}])" in str(info.value)
    result = info.value.result
    assert stored == [result] and result.error is info.value
    if who == 0:
        assert [h["i"] for h in result.history] == list(range(6))
    assert len(result.history) >= 1
    cluster.group.suspect = None


def test_background_run_holds_the_engines_until_stopped(ip, cluster, tmp_path):
    result = cluster.train(until_stopped, storage=tmp_path, background=True)
    assert result.running
    with pytest.raises(ClusterStateError, match="busy with the background training run"):
        cluster.run("x = 1")
    with pytest.raises(UsageError, match="busy with the background training run"):
        ip.run_cell_magic("jax_cluster", "", "x = 1")
    wait_until(lambda: result.history, what="the first report")
    result.stop()
    assert result.wait(30) is result
    assert result.stopped and result.error is None and not result.running
    assert result.reports[0] == result.reports[1] > 0
    cluster.run("x = 1")  # free again


def test_background_magic_fills_its_variable(ip, cluster, tmp_path):
    cluster.run(
        "import jaxnb, time\n"
        "def short_run():\n"
        "    for i in range(20):\n        jaxnb.report({'i': i}); time.sleep(0.02)\n"
    )
    ip.user_ns.pop("bg", None)
    assert ip.run_line_magic("jax_train", f"short_run --background -o bg --storage {tmp_path}") is None
    live = ip.user_ns["bg"]  # bound at once: the live Result
    live.wait(timeout=30)
    deadline = time.monotonic() + 10
    while cluster.busy_with is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ip.user_ns["bg"] is live and not live.running
    assert [h["i"] for h in live.history] == list(range(20))
    assert cluster.busy_with is None


def test_headless_output_has_the_plot_and_summary(ip, tmp_path):
    ip.run_cell("def headless(config):\n"
                "    import jaxnb\n"
                "    for i in range(50):\n        jaxnb.report({'loss': 1 / (i + 1)})\n")
    with capture_output() as captured:
        ip.run_line_magic("jax_train", f"headless --config {{}} --storage {tmp_path}")
    kinds = [set(o.data) for o in captured.outputs]
    assert any("image/png" in k for k in kinds)
    assert any("jaxnb-summary" in o.data.get("text/html", "") for o in captured.outputs)


@pytest.mark.parametrize("flags", ["--steps 50 --config {}", "--config dict(num_steps=50)"])
def test_known_step_count_gives_progress_against_the_total(ip, tmp_path, flags):
    ip.run_cell("def fifty(config):\n"
                "    import jaxnb\n"
                "    for i in range(50):\n        jaxnb.report({'loss': 1 / (i + 1)})\n")
    with capture_output() as captured:
        ip.run_line_magic("jax_train", f"fifty {flags} --storage {tmp_path}")
    (summary,) = [o.data["text/html"] for o in captured.outputs
                  if "jaxnb-summary" in o.data.get("text/html", "")]
    assert "50 / 50" in summary


def test_magic_misuse_is_a_usage_error(ip, tmp_path):
    with pytest.raises(UsageError, match="--steps takes a positive whole number"):
        ip.run_line_magic("jax_train", "headless --steps 0")
    with pytest.raises(UsageError, match="--steps takes a positive whole number"):
        ip.run_line_magic("jax_train", "headless --steps ten")
    with pytest.raises(UsageError, match="--config"):
        ip.run_line_magic("jax_train", "headless --config")
    with pytest.raises(UsageError, match="could not be evaluated"):
        ip.run_line_magic("jax_train", "headless --config undefined_name + 1")
    with pytest.raises(UsageError, match="-o takes a Python name"):
        ip.run_line_magic("jax_train", "headless -o 1x")
    with pytest.raises(UsageError, match="plain folder name"):
        ip.run_line_magic("jax_train", f"headless --name a/b --storage {tmp_path}")


def test_expected_steps_from_argument_or_config():
    from jaxnb._train.step_count import expected_steps

    assert expected_steps({"num_steps": 5, "total_steps": 7}, None) == 7
    assert expected_steps({"max_steps": 9}, 3) == 3
    assert expected_steps({"num_steps": True, "steps": 4}, None) is None
    assert expected_steps([1, 2], None) is None
    with pytest.raises(ValueError, match="steps= takes a positive whole number"):
        expected_steps(None, 0)


def test_a_run_started_right_after_stop_waits_for_the_stopping_one(cluster, tmp_path):
    first = cluster.train(until_stopped, storage=tmp_path, name="first", background=True)
    wait_until(lambda: first.history, what="the first report")
    first.stop()
    assert cluster.busy_with == "first"  # still stopping: the old code refused here as busy
    second = cluster.train(until_stopped, storage=tmp_path, name="second", background=True)
    try:
        assert not first.running and first.stopped
    finally:  # the next test needs the engines free
        second.stop()
    assert second.wait(30).stopped and cluster.busy_with is None


def test_a_run_not_asked_to_stop_is_still_refused_at_once(cluster, tmp_path):
    first = cluster.train(until_stopped, storage=tmp_path, name="held", background=True)
    try:
        started = time.monotonic()
        with pytest.raises(ClusterStateError, match="busy with the background training run"):
            cluster.train(until_stopped, storage=tmp_path, name="refused")
        assert time.monotonic() - started < 2  # no waiting: nobody asked the first run to stop
    finally:
        first.stop()
        first.wait(30)
