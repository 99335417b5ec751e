"""docs/howto/migrate_ray.md: its code runs as written in a real Jupyter kernel on a 2-process
cluster (the Ray loop with only its import changed, the run, the resume), and its mapping
table names only jaxnb calls that exist (tutorial 05's too)."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from support.factories import started_kernel

import jaxnb

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "howto" / "migrate_ray.md"
TUTORIAL = ROOT / "tutorials" / "05_from_ray_and_kubeflow.ipynb"


def code_blocks() -> list[str]:
    """The page's Python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def jaxnb_names(text: str) -> set[str]:
    """Every ``jaxnb.NAME`` a page's table rows name."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return set(re.findall(r"\bjaxnb\.(\w+)", "\n".join(rows)))


def test_every_jaxnb_call_the_tables_name_exists():
    cells = json.loads(TUTORIAL.read_text())["cells"]
    tutorial = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    names = jaxnb_names(PAGE.read_text()) | jaxnb_names(tutorial)
    assert {"get_dataset_shard", "report", "get_checkpoint", "get_context"} <= names
    assert [n for n in names if not hasattr(jaxnb, n)] == []
    assert "no equivalent" not in tutorial.split("get_dataset_shard", 1)[1].split("\n", 1)[0]


def test_the_page_uses_plain_links_and_no_myst_role():
    text = PAGE.read_text()
    assert not re.search(r"\{(ref|class|meth|func|doc)\}`", text)
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (PAGE.parent / target).exists(), target


@pytest.mark.engines
@pytest.mark.timeout(400)
def test_the_ported_ray_loop_runs_as_written(tmp_path):
    start, data, loop, train, show, resume = code_blocks()
    with started_kernel(None) as kernel:
        kernel.ok(f"import os; os.chdir({str(tmp_path)!r})")  # ./jaxnb_runs lands in tmp_path
        for line in start.splitlines():
            kernel.ok(line)
        try:
            kernel.ok(data)
            kernel.ok(loop)
            out = kernel.ok(train, timeout=240)
            assert "--max-failures -1" in train and "--keep-checkpoints 2" in train
            first = kernel.value("dict(error=repr(result.error), loss=result.metrics['loss'], "
                                 "epochs=[h['epoch'] for h in result.history], "
                                 "step=result.checkpoint.step)")
            assert first["error"] == "None", out.shown
            assert first["epochs"] == list(range(30)) and first["loss"] < 0.05  # y = 2x + 1 learnt
            printed = kernel.ok(show).stdout.split()
            assert printed[1:] == ["30", str(first["step"])]
            kept = sorted(p.name for p in (tmp_path / "jaxnb_runs" / "linear" / "checkpoints").iterdir()
                          if p.name.isdigit())
            assert len(kept) == 2  # --keep-checkpoints 2
            kernel.ok(resume, timeout=240)
            more = kernel.value("dict(error=repr(more.error), epochs=[h['epoch'] for h in more.history], "
                                "loss=more.metrics['loss'])")
            assert more["error"] == "None" and more["epochs"] == list(range(30, 40))
            assert more["loss"] <= first["loss"] * 1.5
        finally:
            kernel.ok("%jax_cluster stop")
