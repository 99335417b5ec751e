"""The widgets in a real browser: JupyterLab and Notebook 7 in headless (system) Chromium.

One JupyterLab server for the module; cells run from the page with Shift+Enter
and the checks read what the page shows. ``JAXNB_SCREENSHOTS=1`` rewrites the
README's screenshots under docs/images/. Skipped (one line) where Chromium is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from playwright.sync_api import Browser, BrowserContext, expect, sync_playwright  # noqa: E402
from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    dashboard,
    history,
    open_notebook,
    plot_state,
    run_and_wait,
    run_cell,
    save,
    screenshot,
    slow_page,
    wait_done,
    wait_for,
    wait_idle,
)

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

SETUP = "%load_ext jaxnb\n%jax_cluster start -n 2 --devices-per-process 2 --spares 0"
MESH = """%%jax_cluster
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2, 2), ("data", "model"))
x = jax.jit(lambda: jnp.zeros((8, 6)), out_shardings=NamedSharding(mesh, P("data", "model")))()"""
FUNCS = """%%jax_cluster
import math, time, jaxnb
def slow(config):
    for i in range(config["steps"]):
        time.sleep(config["dt"])
        metrics = {"loss": math.exp(-i / 60) + 0.05}
        if i % 10 == 9:
            metrics["val_loss"] = math.exp(-i / 60) + 0.1
        jaxnb.report(metrics)
        if jaxnb.should_stop():
            break
def broken(config):
    for i in range(30):
        jaxnb.report({"loss": 1 / (i + 1)})
        time.sleep(0.02)
    raise ValueError("broken on purpose")"""
FOREGROUND = "%jax_train slow --config dict(steps=300, dt=0.05) --steps 300 --name fg"
BACKGROUND = "%jax_train slow --config dict(steps=100000, dt=0.03) --name bg --background -o bg"
AFTER_STOP = "%jax_train slow --config dict(steps=20, dt=0.01) --name after"
RESULT = "print('stopped', bg.stopped, 'history', len(bg.history), 'reports', sorted(bg.reports.values()))"
FAILED = "%jax_train broken --name failing"
HANG = "%%jax_cluster\nimport time\nprint('hanging', flush=True)\ntime.sleep(120)"
AFTER = "print('kernel back', 6 * 7)"
#: Issue 15's example: every process prints its own loss once a second.
LIVE = """%%jax_cluster
import time, jax
for i in range(6):
    print("step", i, "loss", round(1 / (i + 1 + jax.process_index()), 3), flush=True)
    time.sleep(1)"""
LAB_CELLS = [SETUP, MESH, "%jax_mesh mesh", "%jax_mesh x", FUNCS, FOREGROUND, BACKGROUND,
             AFTER_STOP, RESULT, FAILED, HANG, AFTER, LIVE]
C = {name: i for i, name in enumerate(["setup", "mesh", "mesh_view", "sharding_view", "funcs", "fg",
                                       "bg", "after_stop", "result", "failed", "hang", "after",
                                       "live"])}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=lab_server.chromium_path(), headless=True,
                                      args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=2)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer, context: BrowserContext) -> Iterator[Watched]:
    """The Lab notebook, open in a tab; its kernel is shut down at the end."""
    path = server.write_notebook("widgets.ipynb", LAB_CELLS)
    watched = open_notebook(context, server.page_url(path))
    yield watched
    if not watched.page.is_closed():
        watched.page.close()
    server.shutdown_kernels()


def test_devices_table_has_one_row_per_process(lab: Watched) -> None:
    out = run_and_wait(lab.page, C["setup"], timeout_s=150)
    table = out.locator(".jaxnb-devices table").first
    table.wait_for()
    rows = table.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => ({text: c.innerText.trim(),"
                          " pad: getComputedStyle(c).paddingLeft})))")
    header, body = rows[0], rows[1:]
    assert [c["text"] for c in header][:3] == ["process", "host", "pid"]
    assert [r[0]["text"] for r in body] == ["p0", "p1"]
    for r in body:
        assert r[1]["text"] and r[2]["text"].isdigit() and r[4]["text"] == "2", r
        assert re.fullmatch(r"\d+ \(\w+\), \d+ \(\w+\)", r[5]["text"]), r
    assert len({r[2]["text"] for r in body}) == 2  # two different pids
    assert all(float(c["pad"].rstrip("px")) >= 6 for c in header + body[0])  # readable cells
    screenshot(table, "devices")
    lab.check_clean()


def test_mesh_grid_is_coloured_by_process_and_sharding_shows(lab: Watched) -> None:
    run_and_wait(lab.page, C["mesh"])
    out = run_and_wait(lab.page, C["mesh_view"])
    cells = out.locator('td[title^="device"]')
    assert cells.count() == 4
    info = cells.evaluate_all("cs => cs.map(c => [c.title, getComputedStyle(c).backgroundColor,"
                              " c.getBoundingClientRect().top])")
    colour = {}
    for title, bg, _ in info:
        proc = int(re.search(r"process (\d+)", title)[1])
        colour.setdefault(proc, set()).add(bg)
    assert sorted(colour) == [0, 1] and all(len(c) == 1 for c in colour.values())
    assert colour[0] != colour[1]
    assert len({round(top) for *_, top in info}) == 2  # a 2 x 2 grid: two rows of two
    screenshot(out.locator(".widget-vbox").first, "mesh")
    sharding = run_and_wait(lab.page, C["sharding_view"])
    text = sharding.inner_text()
    assert "8" in text and "6" in text and "rows \\ cols" in text
    chips = sharding.locator('span[title^="device"]')
    assert chips.count() == 4
    lab.check_clean()


def test_foreground_dashboard_updates_while_training(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, C["funcs"])
    run_cell(page, C["fg"])
    dash = dashboard(cell(page, C["fg"]).locator(".jp-OutputArea"))
    first = wait_for(lambda: (s := plot_state(dash))["visible"] and history(dash)[0] >= 10 and s,
                     what="the first plot")
    second = wait_for(lambda: (s := plot_state(dash))["srcHash"] != first["srcHash"]
                      and history(dash)[2] > first_step(first) and "running" in s["text"] and s,
                      what="the plot to change")
    assert "ETA" in second["text"] and "steps/s" in second["text"]
    assert percent(second["progress"]) > percent(first["progress"]) > 0
    assert [r[0] for r in second["rows"][:2]] == ["0", "1"]  # per-process rates
    assert all("steps/s" in r[2] or "s/step" in r[2] for r in second["rows"][:2])
    out = wait_done(page, C["fg"])
    final = plot_state(dashboard(out))
    assert final["visible"] and len(final["rows"]) >= 2 and "finished" in final["text"]
    assert history(dashboard(out))[2] == 300
    sharp(final)
    lab.check_clean()


@pytest.fixture
def bg_stopped_after(server: lab_server.LabServer) -> Iterator[None]:
    """After the test, whatever happened on the page, run 'bg' is stopped (the next tests need
    the engines free, and one failure should not fail them too)."""
    yield
    server.run_in_kernels("if 'bg' in globals():\n    bg.stop()\n    bg.wait()")


def test_background_run_survives_reload_and_new_tab_then_stops(lab: Watched, server, context,
                                                               bg_stopped_after: None) -> None:
    page = lab.page
    out = run_and_wait(page, C["bg"])  # returns at once; the run goes on
    dash = dashboard(out)
    wait_for(lambda: history(dash)[0] >= 150, what="150 reports")
    screenshot(dash, "dashboard")
    save(page)
    before = history(dash)
    page.reload()
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    dash = dashboard(cell(page, C["bg"]).locator(".jp-OutputArea"))
    dash.wait_for(timeout=60_000)
    back = wait_for(lambda: plot_state(dash)["visible"] and history(dash), what="the dashboard back")
    assert back[1] == 1 and back[0] >= before[0], (before, back)  # the whole history so far
    wait_for(lambda: history(dash)[2] > back[2] + 10, what="updates after the reload")
    lab.check_clean()

    page.close()  # close the tab; open the notebook again in a new one
    new_tab = open_notebook(context, server.page_url("widgets.ipynb"))
    lab.page, lab.errors = new_tab.page, new_tab.errors
    page = lab.page
    dash = dashboard(cell(page, C["bg"]).locator(".jp-OutputArea"))
    dash.wait_for(timeout=60_000)
    again = wait_for(lambda: plot_state(dash)["visible"] and history(dash), what="the dashboard in a new tab")
    assert again[1] == 1 and again[0] >= back[0]
    wait_for(lambda: history(dash)[2] > again[2] + 10, what="updates in the new tab")

    dash.locator("button", has_text="Stop").click()
    run_cell(page, C["after_stop"])  # right after Stop: waits for the stopping run, not "busy"
    after = wait_done(page, C["after_stop"], timeout_s=90)
    assert "busy" not in after.inner_text()
    assert "finished" in plot_state(dashboard(after))["text"]
    stopped = wait_for(lambda: "stopped on request" in (s := plot_state(dash))["text"] and s,
                       what="the stopped status")
    assert stopped["visible"], "the plot disappeared after Stop"
    steps = [r[1] for r in stopped["rows"][:2]]
    assert len(steps) == 2 and steps[0] == steps[1], stopped["rows"]  # same step everywhere
    text = run_and_wait(page, C["result"]).inner_text()
    match = re.search(r"stopped True history (\d+) reports \[(\d+), (\d+)\]", text)
    assert match and match[2] == match[3] == steps[0] and int(match[1]) == int(steps[0]), text
    lab.check_clean()


def test_ended_dashboards_keep_curves_and_tables_after_reload(lab: Watched) -> None:
    page = lab.page
    failed = run_and_wait(page, C["failed"])
    state = plot_state(dashboard(failed))
    assert "failed" in state["text"] and state["visible"] and len(state["rows"]) >= 2
    assert "broken on purpose" in failed.inner_text()
    save(page)
    page.reload()
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    with slow_page(page):  # the widgets' restore races their outputs, as on a loaded machine
        wait_idle(page)
        for name in ("fg", "bg", "failed"):
            dashboard(cell(page, C[name]).locator(".jp-OutputArea")).wait_for(timeout=60_000)
    for name, status in (("fg", "finished"), ("bg", "stopped on request"), ("failed", "failed")):
        dash = dashboard(cell(page, C[name]).locator(".jp-OutputArea"))
        state = wait_for(lambda d=dash: (s := plot_state(d))["visible"] and s, what=f"{name}'s plot")
        assert status in state["text"] and len(state["rows"]) >= 2, (name, state["text"][:300])
    lab.check_clean()


def test_interrupt_from_toolbar_gives_the_notebook_back(lab: Watched) -> None:
    page = lab.page
    run_cell(page, C["hang"])
    expect(cell(page, C["hang"]).locator(".jp-OutputArea")).to_contain_text("hanging", timeout=60_000)
    page.locator('[data-command="notebook:interrupt-kernel"]').first.click()
    out = wait_done(page, C["hang"], timeout_s=60)
    assert "jaxnb: interrupted [p0], [p1]" in out.inner_text()
    assert "kernel back 42" in run_and_wait(page, C["after"]).inner_text()
    lab.check_clean()


def test_live_output_of_a_long_cell_shows_every_process(lab: Watched) -> None:
    """Lines that differ between processes reach the page while the cell runs, labelled;
    at the end the output is the tidy, deterministic form."""
    page = lab.page
    run_cell(page, C["live"])
    target = cell(page, C["live"])
    area = target.locator(".jp-OutputArea")

    def both_early_lines() -> str | bool:
        text = area.inner_text() if area.count() else ""
        running = "*" in target.locator(".jp-InputPrompt").first.inner_text()
        return running and "[p0] step 1 loss 0.5" in text and "[p1] step 1 loss 0.333" in text and text

    wait_for(both_early_lines, timeout_s=30, what="both processes' lines while the cell runs")
    out = wait_done(page, C["live"], timeout_s=60)
    text = out.inner_text()
    assert "[p0] step 5 loss 0.167" in text and "[p1] step 5 loss 0.143" in text, text
    assert text.count("[p0] step 0 loss 1.0") == 1, text  # the live view gave way to the tidy form
    lab.check_clean()


def first_step(state: dict) -> int:
    match = re.search(r"steps \d+–(\d+)", state["history"])
    return int(match[1]) if match else 0


def percent(width: str) -> float:
    return float(width.rstrip("%") or 0)


def sharp(state: dict) -> None:
    """The plot is vector graphics (SVG) that the page draws at its own size: no stretched bitmap."""
    width, height = state["natural"]
    assert width > 0 and state["width"] == pytest.approx(width, abs=1), state
    assert state["height"] == pytest.approx(height, abs=1) and state["lines"] >= 1, state


# ---- Notebook 7: the quickstart, then a training run -----------------------------------------

QUICKSTART = lab_server.REPO / "tutorials" / "01_quickstart.ipynb"
NB7_TRAIN = "%jax_train slow --config dict(steps=150, dt=0.03) --steps 150 --name nb7"


def quickstart_cells() -> list[str]:
    """The quickstart's code cells with a training run before its final ``%jax_cluster stop``."""
    import nbformat

    cells = [c.source for c in nbformat.read(QUICKSTART, as_version=4).cells if c.cell_type == "code"]
    assert "%jax_cluster stop" in cells[-1]
    return [*cells[:-1], FUNCS, NB7_TRAIN, cells[-1]]


def test_notebook7_quickstart_and_training(server: lab_server.LabServer, context: BrowserContext,
                                           lab: Watched) -> None:
    lab.page.close()  # the Lab notebook is done: one tab, one cluster at a time
    server.shutdown_kernels()
    cells = quickstart_cells()
    path = server.write_notebook("quickstart.ipynb", cells)
    nb7 = open_notebook(context, server.page_url(path, front_end="notebook"))
    page = nb7.page
    assert "/notebooks/" in page.url and page.locator("#jp-NotebookPanel, .jp-NotebookPanel").count()
    for i, source in enumerate(cells):
        out = run_and_wait(page, i, timeout_s=150)
        if "%jax_cluster start" in source or "%jax_cluster status" in source:
            rows = out.locator(".jaxnb-devices table tr")
            assert rows.count() == 3, out.inner_text()[:300]
        if source.startswith("%jax_mesh"):
            assert out.locator('td[title^="device"], span[title^="device"]').count() >= 2
        if source == NB7_TRAIN:
            state = plot_state(dashboard(out))
            assert state["visible"] and "finished" in state["text"] and len(state["rows"]) >= 2
            assert history(dashboard(out))[2] == 150
            sharp(state)
        assert "Traceback" not in out.inner_text(), (i, out.inner_text()[:500])
        nb7.check_clean()
    nb7.check_clean()
    page.close()
