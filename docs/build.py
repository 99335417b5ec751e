"""Build the docs site: ``python docs/build.py [OUT]`` (``bash dev docs`` runs it).

Every warning is an error (a broken reference, a docstring that does not parse, a page in no
table of contents), and every reference is checked (nitpicky). The site goes to OUT (default
``docs/_build/html``); open ``index.html`` there.
"""

from __future__ import annotations

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.join(DOCS, "_build", "html")


def build(out: str = SITE) -> int:
    """Write the pages' Markdown forms, then build the whole site afresh into ``out``;
    Sphinx's exit status (0: no warning)."""
    from sphinx.cmd.build import build_main

    sys.path.insert(0, os.path.join(DOCS, "_ext"))
    import jaxnb_markdown

    for path in jaxnb_markdown.write():
        print(f"docs: wrote {os.path.relpath(path)}")

    return build_main(["-E", "-a", "-W", "--keep-going", "-n", "-q", "-b", "html", DOCS, out])


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else SITE
    status = build(out)
    if status == 0:
        print(f"docs: {os.path.relpath(os.path.join(out, 'index.html'))}")
    sys.exit(status)
