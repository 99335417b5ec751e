"""The ``%jax_tune`` view in a real browser (JupyterLab, headless system Chromium): the trials
table and curves update while trials run; interrupting the kernel ends the search."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    lab_notebook,
    run_and_wait,
    run_cell,
    wait_done,
    wait_for,
)

SETUP = "%load_ext jaxnb\n%jax_cluster start -n 2 --spares 0"
FUNCS = """%%jax_cluster
import time, jaxnb
def slow_quadratic(config):
    for step in range(1, config["steps"] + 1):
        if jaxnb.should_stop():
            return
        jaxnb.report({"loss": (config["x"] - 2.0) ** 2 + 1.0 / step, "step": step})
        time.sleep(0.05)"""
SPACE = """def good_then_bad(trial):
    if trial.number == 2:
        return {"x": trial.suggest_float("x_far", 8.0, 9.0)}
    return {"x": trial.suggest_float("x", 1.9, 2.1)}"""
SEARCH = "%jax_tune slow_quadratic --space good_then_bad --trials 30 --config dict(steps=40) -o search"
RESULT = "print('trials', len(search.trials), 'stopped:', search.stopped_because)"
BACKGROUND = ("%jax_tune slow_quadratic --space good_then_bad --trials 30 --config dict(steps=40) "
              "--name bg --background -o bg")
WAIT = "bg.wait(120); print('bg trials', len(bg.trials), 'stopped:', bg.stopped_because)"
CELLS = [SETUP, FUNCS, SPACE, SEARCH, RESULT, BACKGROUND, WAIT]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer) -> Iterator[Watched]:
    with lab_notebook(server, "tune.ipynb", CELLS) as watched:
        yield watched


def rows(view) -> list[list[str]]:
    return view.locator("table").first.evaluate(
        "t => [...t.rows].slice(1).map(r => [...r.cells].map(c => c.innerText.trim()))")


def test_view_updates_while_trials_run_and_stop_ends_the_search(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, 0, timeout_s=150)
    run_and_wait(page, 1)
    run_and_wait(page, 2)
    run_cell(page, 3)
    view = cell(page, 3).locator(".jaxnb-tune").first
    view.wait_for(timeout=120_000)
    wait_for(lambda: len(rows(view)) >= 3 and rows(view)[1][3] == "COMPLETE", timeout_s=120,
             what="two finished trials in the table")
    assert view.locator("svg polyline").count() >= 2  # every trial's curve, drawn by the page
    wait_for(lambda: any(r[3] == "PRUNED" for r in rows(view)), timeout_s=120,
             what="a pruned trial")
    pruned = next(r for r in rows(view) if r[3] == "PRUNED")
    assert int(pruned[4]) < 40  # stopped early: fewer steps than a full trial
    wait_for(lambda: len(rows(view)) >= 4 and rows(view)[-1][3] == "RUNNING"
             and int(rows(view)[-1][4] or 0) >= 5, timeout_s=120, what="trial 3 under way")
    page.locator('[data-command="notebook:interrupt-kernel"]').first.click()
    out = wait_done(page, 3, timeout_s=120)
    assert "stopping run 'trial_" in out.inner_text()  # the first interrupt stops the trial
    final = rows(view)
    assert len(final) < 30 and final[-1][3] == "FAIL" and int(final[-1][4]) < 40
    assert "stopped on request after trial" in view.inner_text()
    out = run_and_wait(page, 4)
    assert "stopped: stopped on request after trial" in out.inner_text()
    lab.check_clean()


def test_stop_search_button_ends_a_background_search_after_the_current_trial(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, 5)  # returns at once; the search goes on
    view = cell(page, 5).locator(".jaxnb-tune").first
    wait_for(lambda: len(rows(view)) >= 2 and rows(view)[0][3] == "COMPLETE", timeout_s=120,
             what="a finished trial")
    view.get_by_role("button", name="Stop search").click()
    out = run_and_wait(page, 6, timeout_s=150)
    text = out.inner_text()
    assert "stopped: stopped on request after trial" in text
    final = rows(view)
    assert len(final) < 30 and all(r[3] in ("COMPLETE", "PRUNED") for r in final)
    assert "stopped on request" in view.inner_text()
    lab.check_clean()
