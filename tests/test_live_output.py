"""Live output of long cells, in a real Jupyter kernel (jupyter_client) driving a real 2-process cluster.

Each test reads the IOPub messages a notebook front end would get, with the
time each reached the client: the live view (a display updated in place) while
the cell runs, then the tidy output as ordinary stream output.
"""

from __future__ import annotations

import ast
import pathlib
import re
import shutil

import pytest
from support.kernel_client import Kernel, kernelspec
from support.kernel_harness import IpcKernelManager

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

EXAMPLE = """%%jax_cluster
import time, jax
printed = []
for i in range(6):
    printed.append(time.time())
    print("step", i, "loss", round(1 / (i + 1 + jax.process_index()), 3), flush=True)
    time.sleep(1)
"""


@pytest.fixture(scope="module")
def k(make_kernel):
    return make_kernel("-n 2 --spares 0")


def per_process(run_text: str) -> dict[int, str]:
    """``{0: "...", 1: "..."}`` from labelled lines ``[p0] ...``."""
    return {int(m[1]): m[2] for m in re.finditer(r"^\[p(\d+)\] (.*)$", run_text, re.M)}


def first_arrival(run, text: str) -> float | None:
    return next((m.at for m in run.messages if text in m.text), None)


def test_example_shows_every_process_line_while_the_cell_runs(k: Kernel):
    run = k.check(EXAMPLE)
    printed = per_process(k.check("%%jax_cluster\nprint(repr(printed[0]))").stream())
    loss = {0: 1.0, 1: 0.5}
    for p in (0, 1):
        seen = first_arrival(run, f"[p{p}] step 0 loss {loss[p]}")
        assert seen is not None, f"process {p}'s first line never reached the client"
        delay = seen - ast.literal_eval(printed[p])
        assert delay < 1.5, f"process {p}'s first line took {delay:.2f} s to arrive"
        assert run.end - seen > 3, "the first line arrived only as the cell ended"
    # At the end: the live view is emptied and the tidy form is ordinary stream output.
    assert run.displays()[-1].content["data"] == {}
    expected = [f"[p{p}] step {i} loss {round(1 / (i + 1 + p), 3)}" for p in (0, 1) for i in range(6)]
    assert run.stream().splitlines() == expected


def test_carriage_return_progress_updates_in_place_per_process(k: Kernel):
    run = k.check(
        "%%jax_cluster\nimport time, jax\n"
        "for i in range(15):\n"
        '    print(f"p{jax.process_index()} at {i + 1}/15", end="\\r", flush=True)\n'
        "    time.sleep(0.1 * (1 + 2 * jax.process_index()))\n"
        "print()\n"
    )
    views = [m.text for m in run.displays()]
    for view in views:  # one line per process, never a pile-up
        assert view.count("[p0] ") <= 1 and view.count("[p1] ") <= 1, view
    # The slow process is visible next to the fast one while the cell runs.
    assert any(
        "[p0] p0 at 15/15" in view and re.search(r"\[p1\] p1 at ([1-9]|1[0-4])/15\n", view) for view in views
    ), views
    assert run.stream() == "[p0] p0 at 15/15\n[p1] p1 at 15/15\n"


def test_tqdm_auto_bars_of_both_processes_show(k: Kernel):
    run = k.check(
        "%%jax_cluster\nimport time, jax\nfrom tqdm.auto import tqdm\n"
        'for i in tqdm(range(10), desc=f"p{jax.process_index()}", mininterval=0, ascii=True):\n'
        "    time.sleep(0.15 * (1 + jax.process_index()))\n"
    )
    widgets = [
        m for m in run.messages if "application/vnd.jupyter.widget-view+json" in m.content.get("data", {})
    ]
    assert widgets == [], "an engine's widget cannot reach the notebook"
    assert any(
        re.search(r"^\[p0\] p0: +\d+%\|", view, re.M) and re.search(r"^\[p1\] p1: +\d+%\|", view, re.M)
        for view in (m.text for m in run.displays())
    )
    bars = run.stream("stderr").splitlines()
    assert len(bars) == 2 and "\r" not in run.stream("stderr")
    assert bars[0].startswith("[p0] p0: 100%|") and bars[1].startswith("[p1] p1: 100%|")


def test_flood_keeps_a_bounded_tail_and_the_full_logs(k: Kernel):
    from jaxnb._cells.live import PAGE_LINES, VIEW_LINES

    run = k.check(
        "%%jax_cluster\nimport jax\nfor i in range(100_000):\n"
        "    print('process', jax.process_index(), 'line', i)\n"
    )
    lines = run.stream().splitlines()
    note = re.fullmatch(
        r"\[jaxnb\] ([\d,]+) lines of output not shown; each process's full output: (\S+)", lines[0]
    )
    assert note, lines[0]
    assert int(note[1].replace(",", "")) == 200_000 - PAGE_LINES
    assert len(lines) == PAGE_LINES + 1
    assert lines[-1] == "[p1] process 1 line 99999"
    for p in (0, 1):
        log = pathlib.Path(note[2].replace("p*", f"p{p}")).read_text().splitlines()
        assert len(log) == 100_000 and log[-1] == f"process {p} line 99999"
    shutil.rmtree(pathlib.Path(note[2]).parent)
    for view in run.displays():
        assert len(view.text.splitlines()) <= VIEW_LINES + 3


def test_saved_notebook_output_is_identical_across_two_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cell = (
        "%%jax_cluster\nimport time, jax\nfor i in range(4):\n"
        "    print('step', i, 'process', jax.process_index(), flush=True)\n    time.sleep(0.5)\n"
    )
    saved = []
    with kernelspec() as name:
        for _ in range(2):
            nb = nbformat.v4.new_notebook()
            nb.cells = [
                nbformat.v4.new_code_cell(src)
                for src in ("%load_ext jaxnb\n%jax_cluster start -n 2 --spares 0", cell, "%jax_cluster stop")
            ]
            nbclient.NotebookClient(nb, kernel_name=name, timeout=300,
                                    kernel_manager_class=IpcKernelManager).execute()
            saved.append(nb.cells[1].outputs)
    assert saved[0] == saved[1]
    kinds = [(o.output_type, o.get("name")) for o in saved[0]]
    assert kinds == [("display_data", None), ("stream", "stdout")]  # the emptied live view, then the text
    assert saved[0][0].data == {}  # renders as nothing; nbval compares no field of it
    assert saved[0][1].text == "".join(f"[p{p}] step {i} process {p}\n" for p in (0, 1) for i in range(4))


def test_capture_output_gets_the_tidy_text_and_no_live_view(k: Kernel):
    run = k.check(
        "from IPython.utils.capture import capture_output\n"
        "with capture_output() as cap:\n"
        "    get_ipython().run_cell_magic('jax_cluster', '', 'import time, jax\\n"
        "for i in range(3):\\n    print(\"step\", i, jax.process_index(), flush=True)\\n"
        "    time.sleep(0.3)\\n')\n"
        "print(repr(cap.stdout), len(cap.outputs))\n"
    )
    assert run.displays() == []
    tidy = "".join(f"[p{p}] step {i} {p}\\n" for p in (0, 1) for i in range(3))
    assert run.stream() == f"'{tidy}' 0\n"


def test_output_before_a_divergence_is_written_tidy_when_the_cell_raises(k: Kernel):
    """Last in this module: it leaves the group to be repaired by the next cell."""
    run = k.timed(
        "%%jax_cluster\nimport time, jax\n"
        "print('before', jax.process_index(), flush=True)\n"
        "time.sleep(0.5)\n"
        "if jax.process_index() == 1:\n    raise ValueError('p1 gave up')\n"
        "time.sleep(60)\n"
    )
    assert run.error() is not None
    assert run.displays()[-1].content["data"] == {}
    assert run.stream() == "[p0] before 0\n[p1] before 1\n"
