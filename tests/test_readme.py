"""The README is the landing page: its example runs as written in a real Jupyter kernel, its
links lead to files that exist, and it stays short (issue 36: at most 200 lines)."""

from __future__ import annotations

import pathlib
import re

import pytest
from support.factories import started_kernel

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def example_cells() -> list[str]:
    """The Python cells of the README's "In a notebook" section, in order."""
    text = README.read_text()
    section = text.split("## In a notebook", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_is_a_landing_page_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository():
    root = README.parent
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)|src=\"([^\"]+)\"", README.read_text())
    local = [a or b for a, b in targets if not (a or b).startswith("http")]
    assert local, "the README links to its docs pages"
    missing = [path for path in local if not (root / path).exists()]
    assert missing == []


def test_the_readme_example_has_a_cluster_a_cell_and_a_training_run():
    cells = example_cells()
    assert cells[0].startswith("%load_ext jaxnb") and "%jax_cluster start" in cells[0]
    assert cells[1].startswith("%%jax_cluster")
    assert any(cell.startswith("%jax_train") for cell in cells)


@pytest.mark.engines
def test_the_readme_example_runs_as_written_in_a_real_kernel():
    first, *rest = example_cells()
    with started_kernel(None) as kernel:
        for line in first.splitlines():
            kernel.ok(line.split("#")[0].strip())
        shown = [kernel.ok(cell).shown for cell in rest]
        try:
            assert "devices: 2" in shown[0] and "[p0] I am process 0" in shown[0]
            assert "[p1] I am process 1" in shown[0]
            ok, reports, loss = kernel.value("[_.error is None, len(_.history), _.metrics['loss']]")
            assert ok and reports == 50 and loss < 1e-6  # gradient descent reached w = 3
        finally:
            kernel.ok("%jax_cluster stop")
