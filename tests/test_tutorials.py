"""The tutorials run headless, end to end, and show what a reader must see.

Each notebook in ``tutorials/`` is executed with papermill on a kernel that runs
*this* Python (a kernelspec written to a temporary ``JUPYTER_PATH``; nothing
global is installed), in a temporary working directory. The executed copies go
to ``tutorials/executed/`` (git-ignored) for inspection. Then:

* no cell has an error output (the tutorials catch the errors they demonstrate, since
  papermill reports failure for any error output, whatever the cell's tags);
* the devices table (static HTML) is there, and a PNG plot where training runs;
* the last code cell stops the cluster, and every engine pid listed in the
  devices tables is gone afterwards;
* each notebook's key results are in its outputs.

* the cells marked ``# NBVAL_CHECK_OUTPUT`` show what the notebook stores for them (their
  text: streams and plain-text results), as nbval checks it.

``test_nbval`` runs ``pytest --nbval-lax`` itself, in a subprocess, on the quickstart
(``NBVAL_RUN``): it executes it again and compares the marked cells' outputs with the
stored ones, which proves nbval runs a jaxnb notebook. The others are executed once (above),
their marked cells compared the same way, not twice: CI's time.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import psutil
import pytest

nbformat = pytest.importorskip("nbformat")
papermill = pytest.importorskip("papermill")

ROOT = pathlib.Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
EXECUTED = TUTORIALS / "executed"
sys.path.insert(0, str(TUTORIALS))
from refresh_outputs import KERNEL_NAME, write_kernelspec  # noqa: E402
from support.kernel_harness import IpcKernelManager  # noqa: E402

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

NOTEBOOKS = sorted(p.name for p in TUTORIALS.glob("[0-9][0-9]_*.ipynb"))

#: Text that must appear in a notebook's outputs (streams, results, errors).
EXPECTED_TEXT = {
    "01_quickstart.ipynb": [
        "global devices: 2",
        "[p0] hello from process 0",
        "[p1] hello from process 1",
        "scaled total: 60.0",
    ],
    "02_multiprocess_jax.ipynb": [
        "psum seen on this process's devices: [3.0]",
        "sum via shard_map + psum: 630.0",
        "RemoteError on processes [1]",
        "(on process [p1])",
        "processes diverged",
        "ProcessFailure - still running: [0]",
        "every process ran 2 steps",
        "straggler: p1, cause: host_ms",
    ],
    "03_data_parallel_training.ipynb": [
        "last epoch: 3 | checkpoint step: 69",
        "resumed from epoch 3 (step 69)",
        "final test accuracy:",
    ],
    "04_gpt2_nnx.ipynb": [
        "reports: 40 | checkpoint at step 40",
        "resumed from step 40",
        "validation loss",
    ],
    "07_gpt2_ray_port.ipynb": [
        "first run: last report at step 25 | checkpoint at step 20",
        "resumed from step 20 and reported steps [25, 30, 30, 35, 40, 40]",
        "identical to the uninterrupted run: True",
    ],
    "05_from_ray_and_kubeflow.ipynb": [
        "Final loss:",
        "loss went down: True",
        "JAX_COORDINATOR_ADDRESS=",
        "epoch 30: loss",
    ],
    "06_tuning.ipynb": [
        "trials run: 6",
        "best trial finished: COMPLETE",
        "pruned trials ended after the report the pruner judged: True",
        "trials in the study: 7",
        "earlier trials kept: True",
        "earlier trials unchanged: True",
    ],
}

#: Notebooks whose outputs must include a PNG (the training dashboard's static plot).
EXPECT_PNG = {
    "03_data_parallel_training.ipynb",
    "04_gpt2_nnx.ipynb",
    "05_from_ray_and_kubeflow.ipynb",
    "06_tuning.ipynb",
    "07_gpt2_ray_port.ipynb",
}

#: The notebooks nbval itself runs (the short ones); every notebook's marked cells are compared
#: with the stored outputs by ``test_tutorial_executes``.
NBVAL_RUN = ["01_quickstart.ipynb"]

#: Seconds one notebook may take (a loaded 2-core CI machine; they usually take far less).
NOTEBOOK_TIMEOUT = 600


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A ``JUPYTER_PATH`` holding a kernelspec that runs this interpreter, nothing else."""
    root = tmp_path_factory.mktemp("jupyter")
    write_kernelspec(root)
    env = {"JUPYTER_PATH": str(root), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    return env


@pytest.fixture
def with_kernel(kernel_env, monkeypatch):
    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)


def _outputs(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                yield cell, out


def _all_text(nb) -> str:
    parts = []
    for _, out in _outputs(nb):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
            parts.extend(out.traceback)
        else:
            data = out.get("data", {})
            parts.append(str(data.get("text/plain", "")))
            parts.append(str(data.get("text/html", "")))
    return "\n".join(parts)


def _html(out) -> str:
    page = out.get("data", {}).get("text/html", "")
    return "".join(page) if isinstance(page, list) else page


def _checked_text(cell) -> list[tuple[str, str]]:
    """What nbval compares of a marked cell, as text: each stream (consecutive parts joined) and
    each result's or display's ``text/plain``, in order."""
    shown: list[tuple[str, str]] = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            kind, text = f"stream {out.name}", out.text
        elif "text/plain" in out.get("data", {}):
            kind, text = out.output_type, out.data["text/plain"]
        else:
            continue
        if shown and shown[-1][0] == kind and kind.startswith("stream"):
            shown[-1] = (kind, shown[-1][1] + text)
        else:
            shown.append((kind, text))
    return shown


def _unlike_stored(name: str, executed) -> list[str]:
    """The marked (``# NBVAL_CHECK_OUTPUT``) cells whose executed text differs from the stored."""
    stored = nbformat.read(TUTORIALS / name, as_version=4)
    ran = {c.source: c for c in executed.cells if c.cell_type == "code"}
    unlike = []
    for cell in stored.cells:
        if cell.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in cell.source:
            got = _checked_text(ran[cell.source]) if cell.source in ran else None
            if got != _checked_text(cell):
                first = cell.source.splitlines()[1][:60]
                unlike.append(f"{first!r}: stored {_checked_text(cell)}, got {got}")
    return unlike


def _engine_pids(nb) -> set[int]:
    """Engine pids listed in the static devices tables of the notebook."""
    pids = set()
    for _, out in _outputs(nb):
        page = _html(out)
        if "jaxnb-devices" in page:
            for row in re.findall(r"<tr><td[^>]*>p\d+</td><td[^>]*>[^<]*</td><td[^>]*>(\d+)</td>", page):
                pids.add(int(row))
    return pids


def _still_running(pids: set[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and "jaxnb" in " ".join(proc.cmdline()):
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_tutorial_executes(name, with_kernel, tmp_path):
    EXECUTED.mkdir(exist_ok=True)
    output = EXECUTED / name
    started = time.monotonic()
    papermill.execute_notebook(
        str(TUTORIALS / name),
        str(output),
        kernel_name=KERNEL_NAME,
        cwd=str(tmp_path),
        progress_bar=False,
        execution_timeout=NOTEBOOK_TIMEOUT,
        kernel_manager_class=IpcKernelManager,
    )
    elapsed = time.monotonic() - started
    print(f"{name}: executed in {elapsed:.1f} s")
    nb = nbformat.read(output, as_version=4)

    errors = [
        f"cell {i}: {out.ename}: {out.evalue[:300]}"
        for i, cell in enumerate(nb.cells)
        for out in cell.get("outputs", [])
        if out.output_type == "error" and "raises-exception" not in cell.metadata.get("tags", [])
    ]
    assert not errors, "unexpected error outputs:\n" + "\n".join(errors)

    pages = [_html(out) for _, out in _outputs(nb)]
    assert any("jaxnb-devices" in page for page in pages), "no devices table (static HTML)"
    if name in EXPECT_PNG:
        assert any("image/png" in out.get("data", {}) for _, out in _outputs(nb)), "no PNG plot"

    text = _all_text(nb)
    missing = [want for want in EXPECTED_TEXT.get(name, []) if want not in text]
    assert not missing, f"expected in the outputs but missing: {missing}"
    unlike = _unlike_stored(name, nb)
    assert not unlike, "marked cells unlike the stored outputs:\n" + "\n".join(unlike)

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert "%jax_cluster stop" in code_cells[-1].source, "the last code cell must stop the cluster"
    pids = _engine_pids(nb)
    assert pids, "no engine pids found in the devices tables"
    deadline = time.monotonic() + 10
    while _still_running(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _still_running(pids), f"engines left running: {_still_running(pids)}"


def test_a_marked_cell_unlike_the_stored_outputs_is_named():
    """The comparison of the marked cells: the stored notebook matches itself; a changed line,
    a missing output or a missing cell does not."""
    name = "06_tuning.ipynb"
    stored = nbformat.read(TUTORIALS / name, as_version=4)
    assert _unlike_stored(name, stored) == []
    marked = [c for c in stored.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]
    stream = next(o for o in marked[0].outputs if o.output_type == "stream")
    stream.text = stream.text.replace("trials run: 6", "trials run: 5")
    marked[1].outputs = []
    unlike = _unlike_stored(name, stored)
    assert len(unlike) == 2 and "trials run: 5" in unlike[0] and unlike[1].endswith("got []"), unlike
    firsts = [repr(c.source.splitlines()[1][:60]) for c in marked[:2]]
    assert [u.startswith(f) for u, f in zip(unlike, firsts, strict=True)] == [True, True], unlike
    stored.cells.remove(marked[0])
    assert "got None" in _unlike_stored(name, stored)[0]


def test_tutorials_are_well_formed():
    """Every tutorial has its number in its title, a papermill parameters cell, and ends by
    stopping the cluster."""
    assert NOTEBOOKS, "no tutorials found"
    assert set(NBVAL_RUN) <= set(NOTEBOOKS), "NBVAL_RUN names a notebook that is not there"
    for name in NOTEBOOKS:
        nb = nbformat.read(TUTORIALS / name, as_version=4)
        nbformat.validate(nb)
        title = nb.cells[0].source.splitlines()[0]
        assert title.startswith(f"# {name[:2]} · "), f"{name}: its title says {title!r}"
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{name}: needs exactly one cell tagged 'parameters'"
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        assert "%jax_cluster stop" in code_cells[-1].source, f"{name}: must end with a stop"
        assert any("NBVAL_CHECK_OUTPUT" in c.source for c in code_cells), (
            f"{name}: mark at least one deterministic cell with # NBVAL_CHECK_OUTPUT"
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", NBVAL_RUN)
@pytest.mark.timeout(NOTEBOOK_TIMEOUT + 60)
def test_nbval(name, tmp_path):
    """``pytest --nbval-lax``: outputs of ``# NBVAL_CHECK_OUTPUT`` cells match the stored ones."""
    pytest.importorskip("nbval")
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={NOTEBOOK_TIMEOUT}",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-o",
        "timeout=0",
        "-q",
        str(TUTORIALS / name),
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT + 30
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
