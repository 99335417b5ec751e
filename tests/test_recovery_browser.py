"""A dashboard through a recovery, in a real browser (JupyterLab, headless system Chromium).

A ``--background`` run with ``--max-failures 2`` on a local 2-process cluster; the
test kills process 1 with SIGKILL (its pid read from the devices table on the page)
and checks what the page showed: the status while it recovered, the recovery
count, the marker on the loss curve, the curve redrawn continuous, and at the end
a header that says finished beside a disabled button. A MutationObserver in the
page records every state the dashboard went through, so a short recovery (a
fraction of a second with warm spares) is not missed between two looks.
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
    wait_for,
)

#: Starts engines, a kernel and a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

STEPS, KILL_AT = 30, 12
SETUP = "%load_ext jaxnb\n%jax_cluster start -n 2 --devices-per-process 1"
LOOP = """%%jax_cluster
def counting(config):
    import time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    start = 0
    checkpoint = jaxnb.get_checkpoint()
    if checkpoint is not None:
        start = int(checkpoint.restore()["step"])
    for step in range(start + 1, config["steps"] + 1):
        multihost_utils.process_allgather(jnp.ones(1))
        saved = {"step": step} if step % 5 == 0 else None
        jaxnb.report({"step": step, "loss": 1.0 / step}, checkpoint=saved)
        if step == config["say_at"] and jaxnb.get_context().get_world_rank() == 0:
            open(config["flag"], "a").close()
        time.sleep(config["pause"])"""
TRAIN = ("%jax_train counting --config dict(steps={steps}, say_at={kill_at}, pause=0.1, flag={flag!r}) "
         "--storage {storage} --steps {steps} --max-failures 2 --background -o run")
WAIT = ("run.wait(120)\nprint('error', run.error, 'failures', len(run.failures),"
        " 'steps', [h['step'] for h in run.history] == list(range(1, {steps} + 1)))")
STOP = "%jax_cluster stop"
C = {name: i for i, name in enumerate(["setup", "loop", "train", "wait", "stop"])}

#: Installed on the run's cell before it runs: ``jaxnbState()`` reads its dashboard as shown
#: (header, the line under it, the button, the recovery markers); ``jaxnbStates`` collects
#: every distinct state, in order, as the page changes.
RECORD = """cellEl => {
    const text = el => el ? el.innerText.replace(/\\s+/g, ' ').trim() : '';
    window.jaxnbState = () => {
        const d = cellEl.querySelector('.jaxnb-dashboard');
        if (!d) return null;
        const rows = d.querySelectorAll(':scope > .widget-hbox');
        const button = rows.length ? rows[0].querySelector('button') : null;
        return {
            header: text(rows.length ? rows[0].querySelector('.widget-html-content') : null),
            speed: text(rows.length > 1 ? rows[1].querySelector('.widget-html-content') : null),
            button: button ? [button.innerText.trim(), button.disabled] : null,
            markers: [...d.querySelectorAll('.jaxnb-plot line.jaxnb-recovery')]
                .map(l => l.textContent.trim()),
        };
    };
    window.jaxnbStates = [];
    let last = '';
    new MutationObserver(() => {
        const state = window.jaxnbState();
        const key = JSON.stringify(state);
        if (state && state.header && key !== last) { last = key; window.jaxnbStates.push(state); }
    }).observe(cellEl, {subtree: true, childList: true, characterData: true, attributes: true});
}"""
#: The final plot: the recovery markers and process 0's loss curve (the one with a title).
FINAL_PLOT = """d => {
    const plot = d.querySelector('.jaxnb-plot');
    const lead = [...plot.querySelectorAll('polyline')].find(p => p.querySelector('title'));
    return {
        panels: plot.querySelectorAll('svg').length,
        markers: [...plot.querySelectorAll('line.jaxnb-recovery')].map(l => l.textContent.trim()),
        points: lead ? lead.getAttribute('points').trim().split(/\\s+/).map(p => +p.split(',')[0]) : [],
        tip: lead ? lead.querySelector('title').textContent : '',
    };
}"""
RECOVERING = re.compile(r"recovering: \[p1\] killed by SIGKILL at step (\d+); resuming from step (\d+)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's storage, and the file process 0 creates when it reaches ``KILL_AT``."""
    return tmp_path_factory.mktemp("run")


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer, folder: Path) -> Iterator[Watched]:
    """The notebook open in JupyterLab; its cluster and kernel are stopped at the end."""
    train = TRAIN.format(steps=STEPS, kill_at=KILL_AT, flag=str(folder / "reached"),
                         storage=folder / "storage")
    cells = [SETUP, LOOP, train, WAIT.format(steps=STEPS), STOP]
    with lab_notebook(server, "recovery.ipynb", cells, last_cell_stops=True) as watched:
        yield watched


def wait_for_file(path: Path, timeout_s: float = 120) -> None:
    """Wait for ``path``, looking every 20 ms (the kill must land well before the run ends)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"the run never reached step {KILL_AT} ({path})"
        time.sleep(0.02)


@pytest.mark.timeout(420)
def test_dashboard_shows_a_recovery_from_kill_9_and_how_the_run_ended(lab: Watched, folder: Path) -> None:
    page = lab.page
    run_and_wait(page, C["setup"], timeout_s=150)
    run_and_wait(page, C["loop"])
    victim = devices_pid(lab.page, C["setup"], "p1")
    assert "python" in " ".join(psutil.Process(victim).cmdline()), "the table's pid is not an engine"
    target = cell(page, C["train"])
    target.evaluate(RECORD)
    run_and_wait(page, C["train"])  # --background: returns at once; the run goes on
    wait_for_file(folder / "reached")
    os.kill(victim, signal.SIGKILL)
    # A cell waiting on the run disables Stop (the kernel takes no click then): run it only
    # once the page showed the recovery, so that every state before it had Stop enabled.
    wait_for(lambda: any(RECOVERING.search(s["header"]) for s in page.evaluate("window.jaxnbStates")),
             timeout_s=90, what="the dashboard's recovering status")
    out = run_and_wait(page, C["wait"], timeout_s=180)
    assert re.search(r"error None failures 1 steps True", out.inner_text()), out.inner_text()
    dash = dashboard(target.locator(".jp-OutputArea"))
    wait_for(lambda: "finished" in dash.inner_text(), timeout_s=60, what="the finished dashboard")
    states = page.evaluate("window.jaxnbStates")
    last = page.evaluate("window.jaxnbState()")
    final = dash.evaluate(FINAL_PLOT)

    at = next((i for i, s in enumerate(states) if RECOVERING.search(s["header"])), len(states))
    match = RECOVERING.search(states[at]["header"]) if at < len(states) else None
    killed_at, resumed_from = (int(match[1]), int(match[2])) if match else (0, -1)
    before = states[:at]
    after = [s for s in states[at:] if "running" in s["header"]]
    marker = f"recovered: resumed from step {resumed_from}"
    count = f"recovered 1 of 2 (resumed from step {resumed_from}"
    shown = next((i for i, s in enumerate(after) if s["markers"]), len(after))
    seen = {
        "recovering status shown": match is not None and killed_at >= KILL_AT
        and 0 < resumed_from <= killed_at and resumed_from % 5 == 0,
        "before: running, recovered 0 of 2, no marker, Stop enabled": bool(before) and all(
            "running" in s["header"] and "recovered 0 of 2" in s["speed"] and s["markers"] == []
            and s["button"] == ["Stop", False] for s in before),
        "after: running, recovered 1 of 2": bool(after) and all(
            "recovered 1 of 2" in s["header"] and count in s["speed"] for s in after),
        "after: the marker shown, and kept": shown < len(after)
        and all(s["markers"] == [marker] for s in after[shown:]),
        "final plot: one marker at the step resumed from": final["markers"] == [marker] * final["panels"],
        "final curve continuous: each step once": final["points"] == sorted(final["points"])
        and len(final["points"]) == STEPS and len(set(final["points"])) == STEPS
        and f"at step {STEPS}" in final["tip"],
        "header says finished, recovered 1 of 2": bool(
            re.search(r"— finished recovered 1 of 2$", last["header"])),
        "the line under it keeps the count": count in last["speed"],
        "and the recovery's time, with its longest phase": bool(re.search(
            rf"resumed from step {resumed_from} in \d+\.\d\d s, longest: [a-z. ]+ \d+\.\d\d s\)",
            last["speed"])),
        "button disabled at the end": last["button"] == ["Finished", True],
    }
    headers = [s["header"] for s in states]
    assert all(seen.values()), {"checks": seen, "headers": sorted(set(headers), key=headers.index),
                                "last": last, "final plot": final}
    button = dash.locator("button").first
    assert button.is_disabled() and "finished" in dash.inner_text()
    lab.check_clean()
