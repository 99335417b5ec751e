"""What a Ray Train port relies on, in a real Jupyter kernel: ``--max-failures -1`` (Ray's
``max_failures=-1``), ``--keep-checkpoints N`` (Ray's ``num_to_keep``), and a final save that
a stopped run still makes (in the loop's ``finally:``, or after a ``should_stop()`` loop)."""

from __future__ import annotations

import os
import pathlib
import signal

import pytest
from support.clusters import wait_until
from support.fault_cells import COUNTING_LOOP
from support.final_save_loops import LOOPS
from support.stop_loops import ends

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

COUNTING = "dict(steps=40, say_at=12, pause=0.05, flag={flag!r})"


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """A real kernel, a 2-process cluster, the recovery loop on the engines and the final-save
    loops in the notebook."""
    return make_kernel("-n 2 --devices-per-process 1", "import jaxnb\n" + LOOPS,
                       "%%jax_cluster\n" + COUNTING_LOOP)


def kept_steps(run_dir: pathlib.Path) -> list[int]:
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


@pytest.mark.timeout(300)
def test_max_failures_minus_one_recovers_and_keep_checkpoints_keeps_n(kernel, tmp_path):
    flag = tmp_path / "reached"
    pid = kernel.value("jaxnb.current_cluster().processes[1].pid")
    msg_id = kernel.send(f"%jax_train counting --config {COUNTING.format(flag=str(flag))} "
                         f"--storage {tmp_path} --max-failures -1 --keep-checkpoints 2 -o run")
    wait_until(flag.exists, timeout=120, what="the run reaching step 12")
    os.kill(pid, signal.SIGKILL)
    out = kernel.collect(msg_id, timeout=240)
    assert out.status == "ok" and out.error is None, out.shown
    assert "recovering run 'counting': [p1] killed by SIGKILL" in out.shown
    assert "(1, no limit)" in out.shown, out.shown
    summary = out.displays[-1]["data"]["text/html"]  # the dashboard's static copy at the end
    assert "recovered 1, no limit" in summary
    assert kernel.value("[h['step'] for h in run.history]") == list(range(1, 41))
    assert kernel.value("run.checkpoint.step") == 40
    assert kept_steps(tmp_path / "counting") == [35, 40]  # Orbax kept the newest 2 of 8


def test_keep_checkpoints_and_minus_one_reach_a_search(kernel, tmp_path):
    out = kernel.ok("%jax_tune counting --space dict(pause=jaxnb.tune.choice([0.0])) --trials 1 "
                    f"--config dict(steps=12, say_at=0, flag='') --storage {tmp_path} --name s "
                    "--metric total --max-failures -1 --keep-checkpoints 1 -o search")
    trial = kernel.value("dict(state=search.trials[0].state, path=search.trials[0].path)")
    assert trial["state"] == "COMPLETE", out.shown
    assert kept_steps(pathlib.Path(trial["path"])) == [10]  # of 5 and 10


def test_bad_keep_checkpoints_is_one_line(kernel):
    out = kernel.run("%jax_train counting --keep-checkpoints 0")
    assert out.stderr.strip() == ("UsageError: --keep-checkpoints takes a whole number >= 1 (the newest "
                                  "checkpoints kept), got 0; e.g. --keep-checkpoints 3"), out.shown


def _stop_and_check(kernel, tmp_path, loop: str, background: bool) -> dict:
    """Run ``loop``; once under way, stop it (``Result.stop()`` in the background, else a kernel
    interrupt); what every process said it ran, checked against the run's end and checkpoint."""
    flag, log = tmp_path / "under_way", tmp_path / "ends"
    line = (f"%jax_train {loop} --config dict(steps=400, flag={str(flag)!r}, log={str(log)!r}) "
            f"--storage {tmp_path} -o run")
    if background:
        kernel.ok(line + " --background")
        wait_until(flag.exists, timeout=120, what="the run reaching step 3")
        kernel.ok("run.stop()")
        assert kernel.value("run.wait(120).running") is False
    else:
        msg_id = kernel.send(line)
        wait_until(flag.exists, timeout=120, what="the run reaching step 3")
        kernel.interrupt()
        out = kernel.collect(msg_id, timeout=120)
        assert out.error is None, out.shown
    run = kernel.value("dict(stopped=run.stopped, error=repr(run.error), at=run.stopped_at, "
                       "ckpt=run.checkpoint.step, w=int(run.checkpoint.restore()['w']), "
                       "last=run.history[-1])")
    ((p0, p1),) = ends(log)
    assert run["stopped"] and run["error"] == "None", run
    assert p0 == p1, (p0, p1)  # every process ended alike
    assert run["ckpt"] == run["w"] == p0["last"] < 400, run  # the final save is the run's checkpoint
    assert run["last"]["final"] == 1
    return p0


def test_a_stopped_ray_loop_runs_its_finally_and_its_final_save(kernel, tmp_path):
    ended = _stop_and_check(kernel, tmp_path, "ray_final_save", background=True)
    assert ended["finally"] and not ended["after_loop"]  # report() ended the loop, as Ray's does


def test_a_should_stop_loop_runs_the_lines_after_it_on_an_interrupt(kernel, tmp_path):
    ended = _stop_and_check(kernel, tmp_path, "polling_final_save", background=False)
    assert ended["after_loop"]
