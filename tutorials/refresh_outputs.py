"""Re-execute tutorials and store their outputs in place (the reference outputs nbval checks).

    python tutorials/refresh_outputs.py                    # every tutorial
    python tutorials/refresh_outputs.py 01_quickstart.ipynb

Each notebook runs with papermill on this Python, in a temporary working
directory. The stored copy keeps the outputs, minus what only makes sense in a
live session: papermill's bookkeeping metadata and the live-widget views (the
static HTML/PNG rendering that jaxnb puts next to every widget stays, so the
saved notebook shows the devices table and plots in any viewer). Run it after a
change that alters the output of a ``# NBVAL_CHECK_OUTPUT`` cell, then review
the diff.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
KERNEL_NAME = "jaxnb-tutorials"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def write_kernelspec(
    root: pathlib.Path, name: str = KERNEL_NAME, env: dict[str, str] | None = None
) -> pathlib.Path:
    """A kernelspec ``name`` that runs this Python, under ``root`` (a ``JUPYTER_PATH``); the
    folder holding it (``root/kernels``). The tutorials, the kernel and the browser tests use it."""
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({name})",
        "language": "python",
        "interrupt_mode": "signal",
        **({"env": env} if env else {}),
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return root / "kernels"


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop run-specific metadata and live-widget views; keep outputs and tags."""
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and WIDGET_VIEW in data and len(data) > 1:
                del data[WIDGET_VIEW]
    return nb


def refresh(name: str) -> float:
    """Execute tutorial ``name`` and store it with its outputs; the seconds it took."""
    import os

    source = HERE / name
    with tempfile.TemporaryDirectory(prefix="jaxnb-tutorial-") as tmp:
        tmp_path = pathlib.Path(tmp)
        write_kernelspec(tmp_path / "jupyter")
        os.environ["JUPYTER_PATH"] = str(tmp_path / "jupyter")
        out = tmp_path / name
        started = time.monotonic()
        import papermill  # here: the kernel tests write kernelspecs with this module, no papermill

        papermill.execute_notebook(
            str(source), str(out), kernel_name=KERNEL_NAME, cwd=tmp, progress_bar=False
        )
        elapsed = time.monotonic() - started
        nb = clean(nbformat.read(out, as_version=4))
    nbformat.write(nb, source)
    return elapsed


def main(argv: list[str]) -> None:
    names = argv or sorted(p.name for p in HERE.glob("[0-9][0-9]_*.ipynb"))
    for name in names:
        print(f"{name}: ", end="", flush=True)
        print(f"{refresh(pathlib.Path(name).name):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
