"""Driving a notebook page as a user would: run cells with Shift+Enter, read what the page shows.

JupyterLab and Notebook 7 share the notebook widgets, so these work in both.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import BrowserContext, Locator, Page, expect, sync_playwright

from . import lab_server

#: Set to regenerate the screenshots under docs/images/ (docs and README) from the browser tests.
SCREENSHOTS_ENV = "JAXNB_SCREENSHOTS"
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "images"
#: What a broken widget shows instead of itself.
WIDGET_ERRORS = ("Error displaying widget", "model not found", "Failed to load model")
#: Console noise that is not jaxnb's: the server's optional endpoints, and Chromium dropping
#: requests when the machine's network interfaces change (other test runs create namespaces).
IGNORED_CONSOLE = (re.compile(r"Failed to load resource: the server responded with a status of 404"),
                   re.compile(r"net::ERR_NETWORK_CHANGED"))
#: Notebook 7.6's own uncaught errors on the first click into any cell, with or without jaxnb
#: (seen on a notebook holding only ``print(1+1)``): not a widget's.
NOTEBOOK7_OWN = (re.compile(r"Cannot read properties of undefined \(reading 'schema'\)"),
                 re.compile(r"Command 'filebrowser:open-path' not registered"))
PROMPT_DONE = re.compile(r"\[\d+\]")


@dataclass
class Watched:
    """A page and the JavaScript errors it logged."""

    page: Page
    errors: list[str] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)  # failed requests, to explain errors

    def check_clean(self) -> None:
        """No JS error in the console and no widget that failed to render."""
        text = self.page.locator("body").inner_text()
        broken = [e for e in WIDGET_ERRORS if e in text]
        assert not broken, f"the page shows {broken}"
        errors = self.errors
        if self.responses and all(r.endswith((".woff", ".woff2")) for r in self.responses):
            # Notebook 7 sometimes answers 403 for one of its own icon fonts (the file is there);
            # a missing glyph, not a widget that failed: the failed requests are listed here.
            errors = [e for e in errors if not e.startswith("Failed to load resource")]
        assert not errors, "JavaScript errors in the console:\n" + "\n".join(
            [*errors, "failed requests:", *self.responses])


@contextlib.contextmanager
def chromium(**options: Any) -> Iterator[BrowserContext]:
    """A headless system Chromium's context (1400x1000 unless ``options`` say otherwise), closed after."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=lab_server.chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        context = browser.new_context(**{"viewport": {"width": 1400, "height": 1000}, **options})
        try:
            yield context
        finally:
            context.close()
            browser.close()


def open_notebook(context: Any, url: str) -> Watched:
    """A new tab on ``url``; returns once the notebook's kernel is idle."""
    page = context.new_page()
    watched = Watched(page)
    ignored = IGNORED_CONSOLE + (() if "/lab/" in url else NOTEBOOK7_OWN)

    def note(text: str) -> None:
        if not any(p.search(text) for p in ignored):
            watched.errors.append(text)

    page.on("console", lambda msg: msg.type == "error" and note(msg.text))
    page.on("pageerror", lambda exc: note(f"uncaught: {exc}"))
    page.on("response", lambda r: r.status >= 400 and watched.responses.append(f"{r.status} {r.url}"))
    page.goto(url)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    wait_idle(page)
    return watched


@contextlib.contextmanager
def lab_notebook(server: lab_server.LabServer, path: str, cells: list[str],
                 last_cell_stops: bool = False) -> Iterator[Watched]:
    """Notebook ``path`` holding code ``cells``, open in JupyterLab in headless Chromium; at the
    end (after running the last cell first, when ``last_cell_stops``: it stops the cluster) the
    page, the server's kernels (each stops its cluster) and the browser are closed."""
    with chromium() as context:
        watched = open_notebook(context, server.page_url(server.write_notebook(path, cells)))
        try:
            yield watched
        finally:
            try:
                if last_cell_stops:
                    run_and_wait(watched.page, len(cells) - 1, timeout_s=60)
            finally:
                watched.page.close()
                server.shutdown_kernels()


def devices_pid(page: Page, index: int, process: str) -> int:
    """The pid the devices table in cell ``index``'s output shows for ``process`` (``p1``)."""
    table = cell(page, index).locator(".jaxnb-devices table").first
    rows = table.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))")
    assert rows[0][:3] == ["process", "host", "pid"], rows
    return int(next(r[2] for r in rows[1:] if r[0] == process))


def wait_idle(page: Page, timeout_s: float = 60) -> None:
    """Wait until the kernel is connected and idle.

    JupyterLab: its status bar says "| Idle" (the toolbar indicator says idle before
    the kernel has even connected). Notebook 7 has no status bar: its toolbar
    indicator goes from "connecting" to "idle".
    """
    if "/lab/" in page.url:
        status = page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first
        status.wait_for(timeout=timeout_s * 1000)
        return
    indicator = page.locator(".jp-Notebook-ExecutionIndicator").first
    expect(indicator).to_have_attribute("data-status", "idle", timeout=timeout_s * 1000)
    expect(page.locator(".jp-NotebookKernelStatus", has_text="Connecting")).to_have_count(0)
    time.sleep(1)


def cell(page: Page, index: int) -> Locator:
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def run_cell(page: Page, index: int) -> None:
    """Select cell ``index`` (click its prompt) and press Shift+Enter."""
    target = cell(page, index)
    target.scroll_into_view_if_needed()
    target.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Shift+Enter")


def wait_done(page: Page, index: int, timeout_s: float = 120) -> Locator:
    """Wait until cell ``index`` has run (its prompt shows a number); its output area."""
    target = cell(page, index)
    expect(target.locator(".jp-InputPrompt").first).to_have_text(PROMPT_DONE, timeout=timeout_s * 1000)
    return target.locator(".jp-OutputArea")


def run_and_wait(page: Page, index: int, timeout_s: float = 120) -> Locator:
    run_cell(page, index)
    return wait_done(page, index, timeout_s)


def save(page: Page) -> None:
    """Ctrl+S, then wait until the server has stored the notebook (its PUT answered)."""
    with page.expect_response(lambda r: r.request.method == "PUT" and "/api/contents/" in r.url,
                              timeout=30_000):
        page.keyboard.press("Control+s")


@contextlib.contextmanager
def slow_page(page: Page, rate: float = 8) -> Iterator[None]:
    """The page's CPU slowed ``rate`` times (Chromium's own throttling), as on a loaded machine:
    from just after a reload, the widgets' restore from the kernel then lands while their
    outputs wait for them (jupyterlab_widgets 3.0.17 lost that race in about half the reloads)."""
    session = page.context.new_cdp_session(page)
    session.send("Emulation.setCPUThrottlingRate", {"rate": rate})
    try:
        yield
    finally:
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 1})


def dashboard(output: Locator) -> Locator:
    return output.locator(".jaxnb-dashboard").first


def plot_state(dash: Locator) -> dict[str, Any]:
    """What the dashboard shows: plot image (source length, size), history line, table rows, text.

    Scrolled into view in the same call that reads it: when the run ends, the display's update
    replaces the dashboard's element, and a view resolved before that would be detached by the
    time a second call used it (Playwright's scroll then fails: "Element is not attached").
    """
    return dash.evaluate("""el => {
        el.scrollIntoView({block: 'nearest'});
        const plot = el.querySelector('.jaxnb-plot');
        const svgs = plot ? [...plot.querySelectorAll('svg')] : [];
        const box = svgs.length ? svgs[0].getBoundingClientRect() : null;
        const rows = [...el.querySelectorAll('table tr')].slice(1)
            .map(tr => [...tr.querySelectorAll('td,th')].map(c => c.innerText.trim()));
        return {
            panels: svgs.length,
            src: plot ? plot.innerHTML.length : 0,
            srcHash: plot ? plot.innerHTML.length + ':' + plot.innerHTML.slice(-300) : '',
            visible: !!(box && box.width > 0 && box.height > 0),
            width: box ? box.width : 0, height: box ? box.height : 0,
            natural: svgs.length ? [+svgs[0].getAttribute('width'), +svgs[0].getAttribute('height')] : [0, 0],
            lines: plot ? plot.querySelectorAll('polyline').length : 0,
            history: (el.querySelector('.jaxnb-history') || {}).innerText || '',
            rows, text: el.innerText,
            progress: el.querySelector('.progress-bar')?.style.width || '',
        };
    }""")


def history(dash: Locator) -> tuple[int, int, int]:
    """(reports, first step, last step) from the dashboard's ``plotted: …`` line; zeros before one."""
    match = re.search(r"plotted: (\d+) reports, steps (\d+)–(\d+)", plot_state(dash)["history"])
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def wait_for(predicate: Any, timeout_s: float = 60, what: str = "condition") -> Any:
    """Poll ``predicate()`` until truthy; its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.25)


def screenshot(target: Locator, name: str) -> None:
    """Write ``docs/images/<name>.png`` when regenerating screenshots (``JAXNB_SCREENSHOTS=1``)."""
    if os.environ.get(SCREENSHOTS_ENV):
        DOCS.mkdir(exist_ok=True)
        target.scroll_into_view_if_needed()
        box = target.evaluate("""el => {  // the element, cropped to its content's right edge
            const r = el.getBoundingClientRect();
            const rights = [...el.querySelectorAll('table, img, button, input, .widget-slider')]
                .map(c => c.getBoundingClientRect().right);
            const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
            const range = document.createRange();
            while (walk.nextNode()) {
                range.selectNodeContents(walk.currentNode);
                rights.push(range.getBoundingClientRect().right);
            }
            const right = Math.max(r.left + 100, ...rights);
            return {x: r.left, y: r.top, width: Math.min(r.width, right - r.left + 12), height: r.height};
        }""")
        target.page.screenshot(path=str(DOCS / f"{name}.png"), clip=box)
