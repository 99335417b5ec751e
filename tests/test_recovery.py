"""``--max-failures`` and ``restart --replay`` on two real JAX processes.

The processes are killed for real (SIGKILL from inside the train function, once per
marker file), so this module has a cluster of its own.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from jaxnb import JaxCluster, ProcessFailure, RemoteError, ReplayError

#: Starts engines (or a kernel): not in `bash dev test fast`.
pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def cluster(make_cluster):
    """This module's own cluster: its tests kill processes and restart it."""
    return make_cluster()


# ---- functions that run on the engines --------------------------------------------------


def checkpointed_loop(config):
    """A loop whose full state (params, step) is checkpointed every ``every`` steps.

    Each step all-gathers (a collective), draws data from the step number (so a
    resumed run sees the same data) and takes a gradient step. ``kills`` lists
    ``(process, step, marker file)``: that process SIGKILLs itself at that step, once.
    """
    import os
    import signal

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    key = jax.random.PRNGKey(0)
    state = {"w": jnp.zeros((4,), jnp.float32), "step": 0}
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        state = checkpoint.restore()
    w, start = jnp.asarray(state["w"]), int(state["step"])

    @jax.jit
    def update(w, x, y):
        grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.05 * grad, jnp.mean((x @ w - y) ** 2)

    for step in range(start + 1, config["steps"] + 1):
        k = jax.random.fold_in(key, step)
        x = jax.random.normal(k, (16, 4))
        y = x @ jnp.arange(4.0)
        w, loss = update(w, x, y)
        multihost_utils.process_allgather(jnp.ones(1))
        saved = {"w": w, "step": step} if step % config["every"] == 0 else None
        jaxnb.report({"step": step, "loss": loss}, checkpoint=saved)
        for victim, at, marker in config.get("kills", ()):
            if rank == victim and step == at and (config.get("always") or not os.path.exists(marker)):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0 and config.get("out"):
        np.save(config["out"], np.asarray(w))


def uses_setup(config):
    """Needs ``offset`` from a %%jax_cluster cell and ``scale`` from a push (replayed)."""
    import os
    import signal

    import jaxnb

    rank = jaxnb.get_context().get_world_rank()
    for step in range(1, config["steps"] + 1):
        jaxnb.report({"step": step, "v": offset + scale * step})  # noqa: F821 (engine names)
        if rank == 1 and step == 3 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def raises_at(config):
    import jaxnb

    for step in range(1, 100):
        jaxnb.report({"step": step})
        if step == config["at"] and jaxnb.get_context().get_world_rank() == 1:
            raise ValueError("a bug in the loop")


#: The phase a recovery of a cluster without spares (``make_cluster``'s default) names.
NO_SPARE_KEPT = ("no spare ready: this cluster keeps no spares (--spares 0, or a batch "
                 "launcher's nodes); started new engines")


def _kills(tmp_path, *points):
    return [(p, s, str(tmp_path / f"killed-{p}-{s}")) for p, s in points]


def _steps(result):
    return [h["step"] for h in result.history]


# ---- recovery ---------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_killed_twice_ends_bit_identical_to_an_uninterrupted_run(cluster, tmp_path):
    config = {"steps": 30, "every": 5}
    clean = cluster.train(checkpointed_loop, {**config, "out": str(tmp_path / "clean.npy")},
                          name="clean", storage=tmp_path)
    assert clean.error is None and _steps(clean) == list(range(1, 31))
    killed = cluster.train(
        checkpointed_loop,
        {**config, "out": str(tmp_path / "killed.npy"), "kills": _kills(tmp_path, (1, 12), (0, 23))},
        name="killed", storage=tmp_path, max_failures=2)
    assert killed.error is None, killed.error
    assert [f.resumed_from for f in killed.failures] == [10, 20]
    # Killing p0 (the coordinator) may also end p1 (JAX aborts it) before jaxnb looks:
    # both are listed as dead, p0 first as the cause.
    assert killed.failures[0].processes == (1,) and 0 in killed.failures[1].processes
    assert killed.failures[0].cause.startswith("[p1]") and "SIGKILL" in killed.failures[0].cause
    assert killed.failures[1].cause.startswith("[p0]") and "SIGKILL" in killed.failures[1].cause
    # The step the notebook had heard of when it saw the death: the dead process's last reports
    # may die with it, and a survivor's newest ones may still wait in its 20 ms batch when it is
    # stopped (under load, step 11 for a kill at 12); never before the checkpoint, never past it.
    assert 10 <= killed.failures[0].step <= 12 and 20 <= killed.failures[1].step <= 23, killed.failures
    for failure in killed.failures:  # each phase timed, in order; their sum is the total
        assert list(failure.phases) == ["detect", "stop the old group", "start or swap",
                                        "join jax.distributed", "replay", "restore", "first step",
                                        NO_SPARE_KEPT]  # this cluster keeps no spares: it says so
        assert failure.phases[NO_SPARE_KEPT] == 0.0  # nothing waited for
        assert all(s >= 0 for s in failure.phases.values()) and failure.phases["restore"] > 0
        assert failure.seconds == pytest.approx(sum(failure.phases.values()), abs=0.01)
    assert _steps(killed) == list(range(1, 31))  # the redone steps replaced the lost ones
    assert [h["loss"] for h in killed.history] == [h["loss"] for h in clean.history]
    assert np.load(tmp_path / "killed.npy").tobytes() == np.load(tmp_path / "clean.npy").tobytes()
    assert cluster.busy_with is None and cluster.suspect is None


@pytest.mark.timeout(180)
def test_a_failure_at_the_same_step_after_a_restore_is_not_retried_forever(cluster, tmp_path):
    config = {"steps": 30, "every": 5, "kills": _kills(tmp_path, (1, 12)), "always": True}
    with pytest.raises(ProcessFailure) as info:
        cluster.train(checkpointed_loop, config, storage=tmp_path, max_failures=3)
    message = info.value.summary
    # The step heard of may be a report or two behind the death (recovery.STEP_SLACK).
    assert re.search(r"repeats at step 1[0-2] after a restore from step 10", message), message
    assert len(info.value.result.failures) == 2
    cluster.restart()


@pytest.mark.timeout(180)
def test_more_failures_than_allowed_fails_listing_every_cause(cluster, tmp_path):
    config = {"steps": 30, "every": 5, "kills": _kills(tmp_path, (1, 7), (0, 13))}
    with pytest.raises(ProcessFailure) as info:
        cluster.train(checkpointed_loop, config, storage=tmp_path, max_failures=1)
    message = info.value.summary
    assert "gave up after 1 recovery (max_failures=1)" in message, message
    assert "1) at step 7: [p1]" in message and "2) at step 13: [p0]" in message
    assert [f.processes[0] for f in info.value.result.failures] == [1, 0]
    cluster.restart()


@pytest.mark.timeout(120)
def test_an_exception_in_the_loop_is_not_retried(cluster, tmp_path):
    with pytest.raises(RemoteError) as info:
        cluster.train(raises_at, {"at": 3}, storage=tmp_path, max_failures=2)
    assert not isinstance(info.value, ProcessFailure)
    assert "a bug in the loop" in info.value.summary
    assert "not retried: it was raised by the training function on a live process" in info.value.summary
    assert info.value.result.failures == []
    cluster.group.suspect = None


@pytest.mark.timeout(180)
def test_without_a_checkpoint_it_starts_again_from_step_0(cluster, tmp_path, capfd):
    config = {"steps": 12, "every": 100, "kills": _kills(tmp_path, (1, 4))}
    result = cluster.train(checkpointed_loop, config, storage=tmp_path, max_failures=1)
    assert result.error is None and _steps(result) == list(range(1, 13))
    assert result.failures[0].resumed_from is None
    assert "reported no checkpoint yet; restarting it from step 0" in capfd.readouterr().err


def test_max_failures_must_be_a_whole_number(cluster, tmp_path):
    for bad in (-2, 1.5, True):
        with pytest.raises(ValueError, match="max_failures= takes a whole number >= 0, or -1 for no limit"):
            cluster.train(raises_at, {"at": 3}, storage=tmp_path, max_failures=bad)


# ---- replay -----------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_restart_with_replay_brings_the_setup_back(cluster, tmp_path):
    cluster.restart()  # a clean record
    cluster.run("offset = 100\nlog = []")
    cluster.push(scale=2)
    with pytest.raises(RemoteError):
        cluster.run("log.append('failed'); raise ValueError('not replayed')")
    cluster.run("log.append('one process shown')", process=0)
    cluster.run("log.append('every process')")
    assert [s.kind for s in cluster.group.setup.steps] == ["cell", "push", "cell"]
    cluster.restart(replay=True)
    cluster.run("state = (offset, scale, log)")
    assert cluster.pull("state") == (100, 2, ["every process"])
    # A training function defined by a cell comes back through replay on recovery too.
    result = cluster.train(uses_setup, {"steps": 6, "marker": str(tmp_path / "m")},
                           storage=tmp_path, max_failures=1)
    assert result.error is None and [h["v"] for h in result.history] == [100 + 2 * s for s in range(1, 7)]
    assert len(result.failures) == 1


@pytest.mark.timeout(120)
def test_a_replayed_cell_that_fails_stops_with_the_cell_shown(cluster, tmp_path):
    cluster.restart()
    cluster.run(f"import os\nflag = {str(tmp_path / 'flag')!r}\n")
    cluster.run("if os.path.exists(flag):\n    raise RuntimeError('the data moved')")
    (tmp_path / "flag").touch()
    with pytest.raises(ReplayError) as info:
        cluster.restart(replay=True)
    assert "replaying setup step 2 of 2" in info.value.summary
    assert "RuntimeError: the data moved" in info.value.summary
    assert "raise RuntimeError('the data moved')" in str(info.value)
    assert cluster.running
    cluster.restart()


def test_a_fresh_start_forgets_the_setup():
    c = JaxCluster(n=1)
    c.group.setup.cell("x = 1")
    c.group.setup.push({"y": 2})
    assert c.group.setup.summary() == "1 cell and 1 push"
    try:
        c.start()
        assert len(c.group.setup) == 0
    finally:
        c.stop()


# ---- the magics -------------------------------------------------------------------------


@pytest.fixture
def magics(ip, cluster):
    from jaxnb.magics import current_cluster, use_cluster

    previous = current_cluster(ip)
    use_cluster(cluster, ip)
    yield ip
    use_cluster(previous, ip)


@pytest.mark.parametrize(("line", "says"), [
    ("raises_at --max-failures -2", "--max-failures takes a whole number >= 0, or -1 for no limit, got '-2'"),
    ("raises_at --max-failures two", "--max-failures takes a whole number >= 0, or -1 for no limit, got "
     "'two'"),
    ("raises_at --keep-checkpoints 0", "--keep-checkpoints takes a whole number >= 1 (the newest checkpoints "
     "kept), got 0"),
    ("raises_at --keep-checkpoints x", "--keep-checkpoints takes a positive whole number, got 'x'"),
])
def test_bad_max_failures_is_a_usage_error(magics, line, says):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as info:
        magics.run_line_magic("jax_train", line)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_replay_goes_with_restart_only(magics):
    from IPython.core.error import UsageError

    for sub in ("stop", "status", "start"):
        with pytest.raises(UsageError, match=f"--replay goes with `%jax_cluster restart`, not `{sub}`"):
            magics.run_line_magic("jax_cluster", f"{sub} --replay")
    assert "--max-failures" in magics.find_line_magic("jax_train").__doc__
    assert "--replay" in magics.find_line_magic("jax_cluster").__doc__


@pytest.mark.timeout(120)
def test_magics_record_and_replay_cells_and_pushes(magics):
    from IPython.utils.capture import capture_output

    magics.run_line_magic("jax_cluster", "restart")
    magics.run_cell_magic("jax_cluster", "", "from_cell = 7")
    magics.user_ns["pushed"] = [1, 2]
    magics.run_line_magic("jax_push", "pushed")
    magics.run_line_magic("jax_pull", "from_cell")
    with capture_output() as cap:
        magics.run_line_magic("jax_cluster", "restart --replay")
    assert "jaxnb: replayed 1 cell and 1 push" in cap.stdout
    magics.run_cell_magic("jax_cluster", "", "both = (from_cell, pushed)")
    magics.run_line_magic("jax_pull", "both")
    assert magics.user_ns["both"] == (7, [1, 2])


# ---- Stop and interrupts during a recovery ----------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["stop", "interrupt"])
def test_stop_or_interrupt_during_a_recovery_ends_the_run_cleanly(cluster, tmp_path, how):
    import _thread
    import threading
    import time

    cluster.restart()
    slow, replaying = tmp_path / "slow-replay", tmp_path / "replaying"
    cluster.run(f"import os, time\nif os.path.exists({str(slow)!r}):\n"
                f"    open({str(replaying)!r}, 'w').close()\n    time.sleep(4)")
    slow.touch()  # from now on, replaying that cell takes 4 s: the recovery is under way
    config = {"steps": 400, "every": 5, "kills": _kills(tmp_path, (1, 6))}
    runs: list = []

    def press_during_recovery() -> None:
        """Once the new engines replay the setup (restarted, not yet resumed)."""
        deadline = time.monotonic() + 120
        while not replaying.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        runs[0].stop() if how == "stop" else _thread.interrupt_main()

    if how == "stop":
        runs.append(cluster.train(checkpointed_loop, config, storage=tmp_path, max_failures=2,
                                  background=True))
        press_during_recovery()
        result = runs[0].wait(120)
    else:
        threading.Thread(target=press_during_recovery, daemon=True).start()
        result = cluster.train(checkpointed_loop, config, storage=tmp_path, max_failures=2)
    assert result.error is None and result.stopped
    assert len(result.failures) == 1
    assert cluster.busy_with is None
    cluster.run("after = 1")  # nothing left running: the engines take the next cell
    cluster.restart()
