"""Where a stopped run ends, on one process (the agreement across processes is tested in real
kernels: ``test_stop_kernel.py``, ``test_tune_kernel.py``)."""

from __future__ import annotations

import os

import pytest

from jaxnb._core.contract import STOP_SIGNAL
from jaxnb._engine.run import stopping


@pytest.fixture
def points():
    """The stop points of a one-process run, with the stop signal's handler armed."""
    stopping.arm()
    run = stopping.StopPoints("run", 0, 1)
    run.start()
    yield run
    run.finish()
    stopping.arm()  # no request left for the next test


def test_a_run_not_asked_goes_on(points):
    assert [points.reached() for _ in range(1000)] == [False] * 1000
    assert points.count == 1000 and points.end is None


def test_the_stop_signal_ends_the_run_at_the_next_point(points):
    assert not points.reached()
    os.kill(os.getpid(), STOP_SIGNAL)  # what the notebook sends
    assert stopping.requested()
    assert points.reached() and points.end == 2


def test_stop_run_is_not_caught_by_except_exception():
    """The user's ``except Exception:`` must not swallow the end of a stopped run."""
    assert not issubclass(stopping.StopRun, Exception)
    with pytest.raises(stopping.StopRun):
        try:
            raise stopping.StopRun("stop")
        except Exception:  # what a training loop may have
            pytest.fail("caught")


@pytest.fixture
def one_process_run(points):
    """``report()`` and ``should_stop()`` inside a one-process run, its reports published to a
    list (the engine's IOPub stands in as a plain function)."""
    from jaxnb._engine.run import reporting
    from jaxnb._engine.run.publisher import BatchPublisher

    sent: list[dict] = []
    run = reporting._Run(run_dir="unused", process=0, fn=print, args=(), resume=None, stop=points,
                         publisher=BatchPublisher(sent.append))
    reporting._run = run
    yield reporting
    reporting._run = None
    assert run.publisher is not None
    run.publisher.close()


def test_a_loop_polling_should_stop_ends_itself_when_the_stop_lands_on_a_report(one_process_run):
    """The stop asked between ``should_stop()`` and ``report()``: the report does not raise, the
    next poll says True, and the lines after the loop run (a Ray-style final save)."""
    jaxnb = one_process_run
    assert not jaxnb.should_stop()
    os.kill(os.getpid(), STOP_SIGNAL)
    jaxnb.report({"step": 1})  # the agreed end is this report: the loop polls, so it goes on
    assert jaxnb.should_stop()
    jaxnb.report({"step": 1, "final": 1})  # after the loop
    assert jaxnb._run is not None and jaxnb._run.stopped


def test_a_loop_that_never_polls_ends_at_the_report(one_process_run):
    jaxnb = one_process_run
    jaxnb.report({"step": 1})
    os.kill(os.getpid(), STOP_SIGNAL)
    with pytest.raises(stopping.StopRun):
        jaxnb.report({"step": 2})


def test_a_loop_polling_only_now_and_then_still_ends_at_a_report(one_process_run):
    jaxnb = one_process_run
    assert not jaxnb.should_stop()
    jaxnb.report({"step": 1})
    os.kill(os.getpid(), STOP_SIGNAL)
    with pytest.raises(stopping.StopRun):
        jaxnb.report({"step": 2})  # no poll since the last report
