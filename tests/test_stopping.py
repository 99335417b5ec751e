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
