"""The debugger headless, as papermill runs a notebook (no input prompt): ``%jax_debug -c`` on
the failure of a cell tagged ``raises-exception`` (papermill runs the cells after it, then
reports that error), ``-c`` commands that answer the next
``jaxnb.breakpoint()``, a breakpoint without commands (one note, no stop), ``%jax_who`` and
``%jax_diff``; every answer saved in the executed notebook."""

from __future__ import annotations

import sys

import pytest
from test_debug_kernel import FAILS_ON_P1, VARIABLES

nbformat = pytest.importorskip("nbformat")
papermill = pytest.importorskip("papermill")

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tutorials"))
from refresh_outputs import KERNEL_NAME, write_kernelspec  # noqa: E402
from support.kernel_harness import IpcKernelManager  # noqa: E402

#: Starts a kernel and engines: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

CELLS = [
    "%load_ext jaxnb\n%jax_cluster start -n 2 --spares 0",
    FAILS_ON_P1,
    '%jax_debug -c "p v; up; p x; w"',
    "%%jax_cluster\nimport jaxnb\nr = jax.process_index()",
    '%jax_debug -c "all: p x.shape; p r; p1: p r; c"',
    "%%jax_cluster\njaxnb.breakpoint()\nprint('after', r)",
    "%%jax_cluster\njaxnb.breakpoint()\nprint('again', r)",
    VARIABLES,
    "%jax_who",
    "%jax_diff diverged",
    "%jax_cluster stop",
]


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def test_the_debugger_under_papermill_with_commands(tmp_path, monkeypatch):
    root = tmp_path / "jupyter"
    write_kernelspec(root)
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nb.cells[1].metadata["tags"] = ["raises-exception"]
    source, executed = tmp_path / "debug.ipynb", tmp_path / "debug.out.ipynb"
    nbformat.write(nb, source)
    with pytest.raises(papermill.PapermillExecutionError) as failed:  # the tagged cell's error
        papermill.execute_notebook(str(source), str(executed), kernel_name=KERNEL_NAME,
                                   cwd=str(tmp_path), progress_bar=False, execution_timeout=300,
                                   kernel_manager_class=IpcKernelManager)
    assert failed.value.ename == "RemoteError" and "only p1" in failed.value.evalue
    cells = [c for c in nbformat.read(executed, as_version=4).cells if c.cell_type == "code"]
    assert len(cells) == len(CELLS) and all(c.execution_count for c in cells)  # every cell ran
    post = _text(cells[2])
    assert post.startswith("jaxnb: post-mortem of [p1]: ValueError: only p1\n"), post
    assert "(jaxnb p1) p v\n3\n(jaxnb p1) up\n> Cell In[" in post
    assert "(jaxnb p1) p x\nArray(shape=(8, 4), dtype=float32, sharding=cpu:" in post
    assert "jaxnb: no process holds a failure; the 4 commands will answer" in _text(cells[4])
    stop = _text(cells[5])
    assert "[p0], [p1] stopped at jaxnb.breakpoint(), Cell In[" in stop, stop
    assert "(jaxnb p0,p1) all: p x.shape\n(8, 4)\n(jaxnb p0,p1) p r\n[p0] 0\n[p1] 1\n" in stop
    assert "(jaxnb p0,p1) p1: p r\n1\n(jaxnb p0,p1) c\n" in stop
    assert "[p0] after 0\n[p1] after 1\n" in stop
    again = _text(cells[6])
    assert "did not stop [p0], [p1]: no input prompt here" in again and "[p1] again 1" in again
    assert "no: [p1] differs" in _text(cells[8])
    assert _text(cells[9]).startswith("diverged: 1 leaf not the same on every process\n")
    assert all(out.output_type != "error" for cell in cells[2:] for out in cell.get("outputs", []))
