"""A named cluster's live dashboard after JupyterLab's Restart Kernel, in headless Chromium.

The notebook starts ``%jax_cluster start --name NAME`` and a ``--background`` run, then the
test restarts the kernel from JupyterLab's Kernel menu, as a user does. In the new kernel
``%jax_cluster attach NAME`` takes the cluster back and ``%jax_train --attach --name RUN`` shows
the run's live dashboard again: the page must show every report since the run began (from
step 1) and the count must keep growing. Then the run is left (Interrupt: the run goes on),
its dashboard, live still, stops it with its Stop button (pressed once the kernel is idle;
every process ends the run), the cluster stopped, and none of its processes may be left.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    dashboard,
    history,
    lab_notebook,
    plot_state,
    run_and_wait,
    run_cell,
    wait_done,
    wait_for,
    wait_idle,
)
from support.clusters import wait_until  # noqa: E402
from support.named_clusters import family, gone, recorded_in  # noqa: E402

#: Starts engines, kernels and a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

NAME, RUN = "lab-attach", "counting"
SETUP = f"%load_ext jaxnb\n%jax_cluster start -n 2 --name {NAME} --spares 0"
LOOP = """%%jax_cluster
import time, jaxnb
def counting(config):
    for step in range(1, config["steps"] + 1):
        jaxnb.report({"step": step, "loss": 1.0 / step})
        time.sleep(config["pause"])"""
#: Long enough to outlast the restart and the attach on a loaded machine; left running at the end.
TRAIN = (f"%jax_train counting --config dict(steps=5000, pause=0.05) --name {RUN} "
         "--storage {storage} --background -o run")
ATTACH = f"%load_ext jaxnb\n%jax_cluster attach {NAME}"
FOLLOW = f"%jax_train --attach --name {RUN} --storage {{storage}} -o followed"
ENDED = ("followed.wait(30)\nprint('stopped', followed.stopped, 'running', followed.running, 'at a step',\n"
         "      followed.stopped_at is not None and followed.stopped_at <= followed.steps[-1])")
STOP = "%jax_cluster stop"
C = {name: i for i, name in enumerate(["setup", "loop", "train", "attach", "follow", "ended", "stop"])}


@pytest.fixture(scope="module")
def clusters_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the named cluster is recorded (the server's kernels inherit it)."""
    yield from recorded_in(tmp_path_factory.mktemp("clusters"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, clusters_dir: Path) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    """The notebook open in JupyterLab; at the end its cluster is stopped, its kernel shut down."""
    storage = tmp_path_factory.mktemp("runs")
    cells = [SETUP, LOOP, TRAIN.format(storage=storage), ATTACH, FOLLOW.format(storage=storage), ENDED,
             STOP]
    with lab_notebook(server, "attach.ipynb", cells, last_cell_stops=True) as watched:
        yield watched


def restart_from_menu(watched: Watched) -> None:
    """Kernel > Restart Kernel…, then Restart in the dialog; returns once the new kernel is idle."""
    page = watched.page
    page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Restart Kernel…").first.click()
    page.locator(".jp-Dialog-button.jp-mod-accept", has_text="Restart").first.click()
    page.locator(".jp-Dialog").wait_for(state="detached", timeout=30_000)
    wait_idle(page)


@pytest.mark.timeout(300)
def test_restart_kernel_then_attach_brings_the_live_dashboard_back(lab: Watched, clusters_dir: Path) -> None:
    page = lab.page
    run_and_wait(page, C["setup"], timeout_s=150)
    run_and_wait(page, C["loop"])
    before = dashboard(run_and_wait(page, C["train"]))  # --background: returns at once
    heard = wait_for(lambda: history(before)[0] >= 5 and history(before), what="5 reports before the restart")
    processes = family(clusters_dir, NAME)

    restart_from_menu(lab)
    assert not gone(processes), "the cluster died with the kernel"
    attached = run_and_wait(page, C["attach"], timeout_s=60).inner_text()
    assert "2 processes" in attached and attached.count("busy") == 2, attached  # both in the run

    run_cell(page, C["follow"])  # runs until the run ends: left with Interrupt below
    dash = dashboard(cell(page, C["follow"]).locator(".jp-OutputArea"))
    dash.wait_for(timeout=60_000)
    back = wait_for(lambda: plot_state(dash)["visible"] and history(dash), what="the dashboard back")
    assert back[1] == 1 and back[0] >= heard[0], (heard, back)  # every report since the run began
    assert back[0] == back[2], back  # one report per step, none lost while no kernel listened
    later = wait_for(lambda: (h := history(dash))[2] > back[2] + 10 and h, what="the dashboard drawing on")
    assert "running" in plot_state(dash)["text"] and later[1] == 1
    # While the cell waits, the kernel takes no click: the Stop button says so, disabled.
    assert dash.locator("button", has_text="Stop").is_disabled()

    page.locator('[data-command="notebook:interrupt-kernel"]').first.click()
    left = wait_done(page, C["follow"], timeout_s=60).inner_text()
    assert f"stopped following run {RUN!r}; it goes on" in left, left

    going = history(dash)  # left, the dashboard draws on; its Stop button ends the run
    assert dash.locator("button", has_text="Stop").is_enabled()
    wait_for(lambda: history(dash)[2] > going[2] + 5, what="the dashboard drawing after the interrupt")
    dash.locator("button", has_text="Stop").click()
    stopped = wait_for(lambda: "stopped" in (s := plot_state(dash))["text"] and s, what="the stopped status")
    ended = run_and_wait(page, C["ended"]).inner_text()
    assert "stopped True running False at a step True" in ended, (ended, stopped["text"])
    run_and_wait(page, C["stop"], timeout_s=60)
    wait_until(lambda: gone(processes), timeout=30, what="every process of the cluster ending")
    lab.check_clean()
