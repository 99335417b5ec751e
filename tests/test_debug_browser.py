"""The debugger's prompt in a real browser (JupyterLab, headless system Chromium): a user types
commands into the input box under a cell stopped at ``jaxnb.breakpoint()`` and under
``%jax_debug``, and reads the answers in the cell's output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import lab_server
from support.factories import unavailable

unavailable("browser tests", lab_server.missing())

from playwright.sync_api import Locator, Page  # noqa: E402
from support.browser_page import (  # noqa: E402 - only importable where playwright is installed
    Watched,
    cell,
    lab_notebook,
    run_and_wait,
    run_cell,
    wait_done,
    wait_for,
)
from test_debug_kernel import FAILS_ON_P1  # noqa: E402

#: Starts engines, a kernel and a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

SETUP = "%load_ext jaxnb\n%jax_cluster start -n 2 --spares 0"
STOPS = """%%jax_cluster
import jax, jaxnb
r = jax.process_index()
jaxnb.breakpoint()
print('after', r)"""
CELLS = [SETUP, STOPS, FAILS_ON_P1, "%jax_debug"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab_server.LabServer]:
    yield from lab_server.serving(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def lab(server: lab_server.LabServer) -> Iterator[Watched]:
    with lab_notebook(server, "debug.ipynb", CELLS) as watched:
        yield watched


def type_at_prompt(page: Page, index: int, text: str) -> None:
    """Wait for the input box under cell ``index``, type ``text`` and press Enter."""
    boxes = cell(page, index).locator("input.jp-Stdin-input")
    wait_for(lambda: boxes.count() == 1, timeout_s=60, what=f"an input prompt under cell {index}")
    box = boxes.first.element_handle()
    box.fill(text)
    box.press("Enter")
    box.wait_for_element_state("hidden", timeout=30_000)  # answered: the page shows it as text


def shown(output: Locator) -> str:
    return output.inner_text()


def test_a_user_answers_the_breakpoint_prompt_in_jupyterlab(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, 0, timeout_s=150)
    run_cell(page, 1)
    output = cell(page, 1).locator(".jp-OutputArea").first
    type_at_prompt(page, 1, "all: p r")
    wait_for(lambda: "[p1] 1" in shown(output), timeout_s=60, what="both processes' answers")
    text = shown(output)
    assert "[p0], [p1] stopped at jaxnb.breakpoint(), Cell In[" in text, text
    assert "(jaxnb p0,p1)" in text and "[p0] 0" in text
    type_at_prompt(page, 1, "p1: p r + 41")
    wait_for(lambda: "\n42" in shown(output), timeout_s=60, what=f"p1's answer in {shown(output)!r}")
    type_at_prompt(page, 1, "c")
    wait_done(page, 1, timeout_s=60)
    wait_for(lambda: "[p1] after 1" in shown(output), timeout_s=30, what="the cell's end")
    assert "[p0] after 0" in shown(output)
    lab.check_clean()


def test_a_user_answers_the_post_mortem_prompt_in_jupyterlab(lab: Watched) -> None:
    page = lab.page
    run_and_wait(page, 2)
    run_cell(page, 3)
    output = cell(page, 3).locator(".jp-OutputArea").first
    type_at_prompt(page, 3, "p v * 7")
    wait_for(lambda: "\n21" in shown(output), timeout_s=60, what="the answer")
    assert "post-mortem of [p1]: ValueError: only p1" in shown(output)
    type_at_prompt(page, 3, "q")
    wait_done(page, 3, timeout_s=60)
    lab.check_clean()
