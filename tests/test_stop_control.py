"""A live view's Stop button while a cell waits for its run or search: the kernel takes no click
until the cell returns, so ``wait()`` in the main thread marks it inert and says why, and gives
it back when the wait ends (an interrupt, a timeout, the end)."""

from __future__ import annotations

import threading

import pytest

from jaxnb._train.result import Result
from jaxnb._tune.view import TuneView
from jaxnb._widgets.dashboard import Dashboard
from jaxnb._widgets.stop_control import WAITING


def _seen_during_wait(result, button) -> dict:
    """The button's state, read from another thread while the main thread waits."""
    seen: dict = {}

    def look() -> None:
        seen.update(disabled=button.disabled, tooltip=button.tooltip)
        result.set_done()

    threading.Timer(0.05, look).start()
    result.wait(10)
    return seen


def test_a_wait_in_the_main_thread_marks_the_dashboards_stop_inert_then_gives_it_back():
    stopped = []
    dashboard = Dashboard("run", 2, on_stop=lambda: stopped.append(1))
    button, tooltip = dashboard._stop, dashboard._stop.tooltip
    result = Result("run", "/nonexistent/run")
    result.set_view(dashboard)
    assert not button.disabled
    with pytest.raises(TimeoutError):
        result.wait(0.01)
    assert not button.disabled and button.tooltip == tooltip  # given back after a timeout
    assert _seen_during_wait(result, button) == {"disabled": True, "tooltip": WAITING}
    assert not button.disabled and button.tooltip == tooltip
    button.click()
    assert stopped == [1]  # it stops again once the cell no longer waits


def test_a_wait_elsewhere_leaves_the_button_alone_and_a_finished_run_keeps_it_disabled():
    dashboard = Dashboard("run", 2, on_stop=lambda: None)
    result = Result("run", "/nonexistent/run")
    result.set_view(dashboard)
    waiting = threading.Event()

    def wait_in_a_thread() -> None:
        waiting.set()
        with pytest.raises(TimeoutError):
            result.wait(0.3)

    waiter = threading.Thread(target=wait_in_a_thread)
    waiter.start()
    waiting.wait(5)
    assert not dashboard._stop.disabled  # a thread's wait: the kernel still takes clicks
    waiter.join()
    dashboard.finish("finished")
    with pytest.raises(TimeoutError):
        result.wait(0.01)
    assert dashboard._stop.disabled  # nothing left to stop


def test_a_search_views_stop_is_held_the_same_way():
    view = TuneView("study", "loss", "min", 3, on_stop=lambda: None)
    result = Result("trial", "/nonexistent/run")
    result.set_view(view)
    assert _seen_during_wait(result, view._stop) == {"disabled": True, "tooltip": WAITING}
    assert not view._stop.disabled


def test_a_view_without_stop_stays_without():
    dashboard = Dashboard("run", 2)
    result = Result("run", "/nonexistent/run")
    result.set_view(dashboard)
    assert _seen_during_wait(result, dashboard._stop)["disabled"] is True
    assert dashboard._stop.disabled and dashboard._stop.layout.display == "none"
