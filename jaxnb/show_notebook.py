"""Print what an executed notebook shows, as text: ``python -m jaxnb.show_notebook NB.ipynb``.

Used by the README's first command to show the quickstart's results in a terminal.
"""

from __future__ import annotations

import sys

import nbformat

from jaxnb._widgets._display import html_to_text


def render(path: str) -> str:
    """Each code cell's source head and its outputs (HTML tables as text, images as a note)."""
    nb = nbformat.read(path, as_version=4)
    parts = [f"== {path} =="]
    for number, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code" or not cell.get("outputs"):
            continue
        first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
        parts.append(f"\n[{number}] {first}")
        for out in cell.outputs:
            parts.append(_output_text(out))
    return "\n".join(p for p in parts if p)


def _output_text(out: dict) -> str:
    if out.get("output_type") == "stream":
        return out.get("text", "").rstrip()
    if out.get("output_type") == "error":
        return f"ERROR {out.get('ename')}: {out.get('evalue')}"
    data = out.get("data", {})
    if "text/html" in data:
        return html_to_text(data["text/html"])
    if "image/png" in data:
        return "(a PNG plot: open the executed notebook to see it)"
    return str(data.get("text/plain", "")).rstrip()


def main() -> None:
    """Entry point."""
    for path in sys.argv[1:]:
        print(render(path))


if __name__ == "__main__":
    main()
