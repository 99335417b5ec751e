"""A ``--min-processes`` run through a shrink and a grow, in a real browser (JupyterLab,
headless system Chromium) and a real kernel.

``%jax_train … --max-failures 2 --min-processes 2 --background`` on 3 local processes without
warm spares. The test SIGKILLs process 2 (its pid read from the devices table) and the first
engine its restart starts (a lost slot): the run goes on with 2; ``%jax_cluster status`` shows
the lost slot; ``%jax_cluster scale 3`` grows the run back at its next checkpoint. The page's
dashboard shows the process-count track with a shrink and a grow marker, and says how the run
ended. ``JAXNB_SCREENSHOTS=1`` writes it to ``docs/images/resize-dashboard.png`` (the README's).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    dashboard,
    devices_pid,
    lab_notebook,
    run_and_wait,
    screenshot,
    wait_for,
)
from support.clusters import engine_pids, lose_a_slot  # noqa: E402
from test_resize import DATA, LOOP  # noqa: E402

pytestmark = pytest.mark.engines

STEPS = 18
SETUP = "%load_ext jaxnb\n%jax_cluster start -n 3 --spares 0 --init-timeout 30"
TRAIN = ("%jax_train elastic --config dict(steps={steps}, global_batch=12, lr=0.05, pause=0.6, "
         "flags={flags!r}) --datasets train=elastic_data --storage {storage} --steps {steps} "
         "--max-failures 2 --min-processes 2 --background -o run")
WAIT = ("run.wait(300)\nprint('error', run.error, 'sizes', [(f.old_size, f.new_size) for f in "
        "run.failures], 'steps', [h['step'] for h in run.history] == list(range(1, {steps} + 1)))")
C = {name: i for i, name in enumerate(["setup", "loop", "train", "status", "scale", "wait", "stop"])}
#: The final dashboard: its header, the line under it, the panels' titles, the markers.
FINAL = """d => {
    const text = el => el ? el.innerText.replace(/\\s+/g, ' ').trim() : '';
    const rows = d.querySelectorAll(':scope > .widget-hbox');
    const plot = d.querySelector('.jaxnb-plot');
    return {
        header: text(rows[0].querySelector('.widget-html-content')),
        speed: text(rows[1].querySelector('.widget-html-content')),
        titles: [...plot.querySelectorAll('svg > text:first-of-type')].map(t => t.textContent),
        shrinks: [...plot.querySelectorAll('line.jaxnb-shrink')].map(l => l.textContent.trim()),
        grows: [...plot.querySelectorAll('line.jaxnb-grow')].map(l => l.textContent.trim()),
        summary: text(d),
    };
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's storage, and the flags process 0 writes at each step (``step5.on3``)."""
    made = tmp_path_factory.mktemp("run")
    (made / "flags").mkdir()
    return made


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer, folder: Path) -> Iterator[Watched]:
    """The notebook open in JupyterLab; its cluster and kernel are stopped at the end."""
    train = TRAIN.format(steps=STEPS, flags=str(folder / "flags"), storage=folder / "storage")
    cells = [SETUP, "%%jax_cluster\n" + DATA + LOOP, train, "%jax_cluster status",
             "%jax_cluster scale 3", WAIT.format(steps=STEPS), "%jax_cluster stop"]
    with lab_notebook(server, "resize.ipynb", cells, last_cell_stops=True) as watched:
        yield watched


def wait_for_file(pattern: str, folder: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not list(folder.glob(pattern)):
        assert time.monotonic() < deadline, f"no {pattern} in {folder} within {timeout_s:g} s"
        time.sleep(0.02)


@pytest.mark.timeout(600)
def test_the_dashboard_shows_the_process_count_through_a_shrink_and_a_grow(
        lab: Watched, folder: Path) -> None:
    page, flags = lab.page, folder / "flags"
    run_and_wait(page, C["setup"], timeout_s=150)
    run_and_wait(page, C["loop"])
    victim = devices_pid(lab.page, C["setup"], "p2")
    kernel = psutil.Process(victim).ppid()  # local engines are the kernel's children
    assert "python" in " ".join(psutil.Process(victim).cmdline()), "the table's pid is not an engine"
    run_and_wait(page, C["train"])  # --background: returns at once; the run goes on
    wait_for_file("step5.on3", flags)
    lose_a_slot(kernel, engine_pids(kernel))
    os.kill(victim, signal.SIGKILL)
    wait_for_file("*.on2", flags)
    status = run_and_wait(page, C["status"])
    lost = status.locator("tr.jaxnb-lost")
    assert lost.count() == 1 and re.search(r"an engine \(pid \d+\) was killed by SIGKILL during "
                                           r"start-up", lost.inner_text()), status.inner_text()
    assert "2 processes" in status.inner_text() and "1 lost" in status.inner_text()
    said = run_and_wait(page, C["scale"]).inner_text()
    assert "jaxnb: run 'elastic' goes on with 3 processes from its next checkpoint" in said, said
    out = run_and_wait(page, C["wait"], timeout_s=300)
    assert "error None sizes [(3, 2), (2, 3)] steps True" in out.inner_text(), out.inner_text()
    dash = dashboard(cell(page, C["train"]).locator(".jp-OutputArea"))
    wait_for(lambda: "finished" in dash.inner_text(), timeout_s=60, what="the finished dashboard")
    final = dash.evaluate(FINAL)
    panels = len(final["titles"])
    assert final["titles"][-1] == "processes", final
    assert len(final["shrinks"]) == len(final["grows"]) == panels, final  # on every panel
    assert re.fullmatch(r"3 → 2 processes at step \d+", final["shrinks"][0]), final
    assert re.fullmatch(r"2 → 3 processes at step \d+", final["grows"][0]), final
    assert re.search(r"— finished recovered 1 of 2$", final["header"]), final
    assert "3 processes" in final["speed"], final
    screenshot(dash, "resize-dashboard")
    lab.check_clean()
