"""A new run started while the previous one stops waits for it to end (kernel side, no engines;
the same on real engines: ``test_train.py``)."""

from __future__ import annotations

import threading
import time
import types

from jaxnb._core.ongoing import Ongoing
from jaxnb._train import handover


class Finishing(Ongoing):
    """A run's result that ends when told (as a Result does after its dashboard's final plot)."""

    def __init__(self) -> None:
        self._done, self._stop = threading.Event(), None


def _stopping_run(busy: str | None) -> tuple[types.SimpleNamespace, Finishing]:
    result = Finishing()
    monitor = types.SimpleNamespace(stop_requested=True, result=result)
    return types.SimpleNamespace(busy_with=busy, current_run=monitor), result


def test_the_next_run_waits_for_the_result_after_the_engines_are_free():
    group, result = _stopping_run(busy=None)  # engines free, final plot still being drawn
    threading.Timer(0.3, result._done.set).start()
    started = time.monotonic()
    handover.wait_if_stopping(group, seconds=30)
    assert not result.running and 0.25 < time.monotonic() - started < 25  # not the deadline


def test_the_next_run_waits_for_the_engines_then_the_result():
    group, result = _stopping_run(busy="first")

    def end() -> None:
        group.busy_with = None
        time.sleep(0.2)
        result._done.set()

    threading.Thread(target=end).start()
    started = time.monotonic()
    handover.wait_if_stopping(group, seconds=30)
    assert group.busy_with is None and not result.running and time.monotonic() - started < 25


def test_a_run_not_asked_to_stop_is_not_waited_for():
    group, result = _stopping_run(busy="first")
    group.current_run.stop_requested = False
    started = time.monotonic()
    handover.wait_if_stopping(group, seconds=30)
    assert time.monotonic() - started < 10 and result.running  # returned at once, not at 30 s


def test_the_wait_is_bounded():
    group, result = _stopping_run(busy="first")
    started = time.monotonic()
    handover.wait_if_stopping(group, seconds=0.3)
    assert 0.25 < time.monotonic() - started < 10 and result.running
