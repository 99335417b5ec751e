"""A stop is a stop, whether or not the loop asks: in a real Jupyter kernel, a kernel interrupt and
``Result.stop()`` end a ``%jax_train`` run whose loop never calls ``should_stop()`` (a Ray loop as
written) at its next report, on every process at the same one; the code after the loop runs on
none; the ``Result`` says it was stopped, and where."""

from __future__ import annotations

import pytest
from support.clusters import wait_until
from support.stop_loops import LOOPS, ends

#: Starts kernels and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

#: Steps a run would take if nothing stopped it (about 12 s).
STEPS = 400


@pytest.fixture(scope="module")
def kernel(make_kernel):
    """A real kernel with a 2-process cluster and the loops of ``support.stop_loops``."""
    return make_kernel("-n 2 --devices-per-process 1 --spares 0", "import jaxnb\n" + LOOPS)


def config(tmp_path) -> str:
    return (f"dict(steps={STEPS}, sleep=0.02, x=2.0, flag={str(tmp_path / 'under_way')!r}, "
            f"log={str(tmp_path / 'ends')!r})")


def check_stopped_at_one_report(kernel, tmp_path) -> int:
    """The run `run` was stopped early at the same report on every process, said so, and the code
    after the loop ran nowhere; the step it ended at."""
    run = kernel.value("dict(stopped=run.stopped, error=run.error is None, at=run.stopped_at, "
                       "steps=run.steps, shown=repr(run))")
    ((p0, p1),) = ends(tmp_path / "ends")
    assert run["stopped"] and run["error"], run["shown"]
    assert p0["last"] == p1["last"] == run["at"] == run["steps"][-1] < STEPS, (p0, p1, run["at"])
    assert not p0["after_loop"] and not p1["after_loop"]  # nothing ran half-way
    assert f"stopped=True, stopped_at={run['at']}" in run["shown"] and "finished" not in run["shown"]
    return run["at"]


def test_one_interrupt_ends_a_run_that_never_asks_at_its_next_report(kernel, tmp_path):
    """The issue: it printed "stops at its next should_stop()", went on to 400/400 and said finished."""
    msg_id = kernel.send(f"%jax_train ray_loop --config {config(tmp_path)} --storage {tmp_path} -o run")
    wait_until((tmp_path / "under_way").exists, what="the run reaching step 3")
    kernel.interrupt()
    out = kernel.collect(msg_id, timeout=120)
    assert out.error is None, out.shown
    assert "every process ends it at the same `jaxnb.report()`" in out.stdout, out.shown
    at = check_stopped_at_one_report(kernel, tmp_path)
    summary = out.displays[-1]["data"]["text/html"]  # the dashboard's static copy at the end
    assert "stopped" in summary and f"at step {at}" in summary


def test_result_stop_ends_a_background_run_that_never_asks(kernel, tmp_path):
    """``Result.stop()`` (what the dashboard's Stop button calls) with no should_stop() in the loop."""
    kernel.ok(f"%jax_train ray_loop --config {config(tmp_path)} --storage {tmp_path} --background "
              "-o run")
    wait_until((tmp_path / "under_way").exists, what="the run reaching step 3")
    kernel.ok("run.stop(); run.wait(60)")
    check_stopped_at_one_report(kernel, tmp_path)
    kernel.ok(f"%jax_train ray_loop --config dict(steps=3, sleep=0, x=2.0, log={str(tmp_path / 'again')!r}) "
              f"--storage {tmp_path} --name again -o again")  # the engines are free, no stop left over
    assert kernel.value("again.stopped") is False and kernel.value("len(again.history)") == 3
