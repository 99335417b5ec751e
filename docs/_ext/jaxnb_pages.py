"""The repository's Markdown pages as the site's pages (a Sphinx extension).

The pages are written to read where they are read first, on GitHub or in a checkout: plain
Markdown links to the files as they are in the repository, no MyST role or directive. When
the site is built:

- a link to a tutorial (``../../tutorials/03_data_parallel_training.ipynb``, or the
  tutorials' ``README.md``) goes to its copy in the site (``docs/tutorials/``, made at build);
- an HTML comment ``<!-- toctree [hidden] [maxdepth=N]`` followed by one page a line and
  ``-->`` (invisible on GitHub) becomes the site's table of contents there;
- a page with a site form in ``docs/_site/`` (the reference and the benchmarks: autodoc and
  jaxnb's directives) is built from that form. The repository's copy of such a page is its
  readable Markdown form, generated from the same (``docs/_ext/jaxnb_markdown.py``).
"""

from __future__ import annotations

import os
import re
from typing import Any

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DOCS)
TUTORIALS = os.path.join(ROOT, "tutorials")
SITE_FORMS = os.path.join(DOCS, "_site")

LINK = re.compile(r"(!?\[([^\]]*)\]\()([^)\s#]+)((?:#[^)\s]*)?\))")
TOCTREE = re.compile(r"^<!-- toctree([^\n]*)\n(.*?)^-->[ \t]*$", re.S | re.M)


def repository_path(docname: str) -> str:
    """Where the page ``docname`` lives in the repository."""
    if docname == "tutorials/index":
        return os.path.join(TUTORIALS, "README.md")
    return os.path.join(DOCS, docname + ".md")


def site_path(path: str) -> str:
    """Where a file of the repository is in the site's sources (a tutorial's copy in
    ``docs/tutorials/``); other files are where they are."""
    if os.path.dirname(path) == TUTORIALS:
        name = os.path.basename(path)
        return os.path.join(DOCS, "tutorials", "index.md" if name == "README.md" else name)
    return path


def site_links(text: str, docname: str) -> str:
    """``text`` with each relative link to a tutorial made a link to its copy in the site, and
    each link to another file of the repository outside ``docs/`` (the README) made plain
    text that names the file (the site has no page for it)."""
    here = os.path.dirname(repository_path(docname))
    there = os.path.dirname(os.path.join(DOCS, docname))

    def moved(match: re.Match[str]) -> str:
        target = match.group(3)
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        path = os.path.normpath(os.path.join(here, target))
        if site_path(path) == path and not path.startswith(DOCS + os.sep):
            if match.group(1).startswith("!"):
                return match.group(0)
            where = os.path.relpath(path, ROOT).replace(os.sep, "/")
            return f"{match.group(2)} (`{where}` in the repository)"
        new = os.path.relpath(site_path(path), there).replace(os.sep, "/")
        return match.group(1) + new + match.group(4)

    return LINK.sub(moved, text)


def toctrees(text: str) -> str:
    """``text`` with each ``<!-- toctree ... -->`` comment made a MyST toctree directive."""

    def directive(match: re.Match[str]) -> str:
        options = [f":{word.replace('=', ': ', 1)}" if "=" in word else f":{word}:"
                   for word in match.group(1).split()]
        entries = [line.strip() for line in match.group(2).splitlines() if line.strip()]
        return "\n".join(["```{toctree}", *options, "", *entries, "```"])

    return TOCTREE.sub(directive, text)


def site_form(docname: str) -> str | None:
    """The text of the page's site form in ``docs/_site/``, if it has one."""
    path = os.path.join(SITE_FORMS, docname + ".md")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def on_source_read(app: Any, docname: str, source: list[str]) -> None:
    if app.env.doc2path(docname).suffix != ".md":
        return  # notebooks keep their own text
    text = site_form(docname) or source[0]
    source[0] = toctrees(site_links(text, docname))


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", on_source_read)
    return {"parallel_read_safe": True, "version": "1"}
