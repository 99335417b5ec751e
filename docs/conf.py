"""Sphinx configuration of jaxnb's documentation (``bash dev docs`` builds it).

Sphinx with MyST-NB, as JAX, Flax, Optax and Orbax do: the pages are Markdown (MyST), the
tutorials are the notebooks CI executed (shown with their stored outputs, never executed
again here), and the reference is made from the docstrings (autodoc) and from the magics'
own argument declarations (``docs/_ext/jaxnb_docs.py``), so it cannot drift from the code.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "jaxnb"
author = "the jaxnb authors"
copyright = "2026, the jaxnb authors"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "jaxnb_docs",
    "jaxnb_pages",  # the repository's Markdown pages (plain links, toctree comments) as site pages
]

# Flags stay as typed: Sphinx's smart quotes turn a "--hosts" outside code into "–hosts".
smartquotes = False

# Pages are Markdown; notebooks are rendered from their stored outputs, never executed.
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
nb_execution_mode = "off"
nb_output_stderr = "show"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# _site holds the site forms of the pages generated as Markdown (docs/_ext/jaxnb_pages.py).
exclude_patterns = ["_build", "_site", "**.ipynb_checkpoints", "tutorials/README.md"]

# Every reference must resolve: a broken link is a warning, and ``bash dev docs`` makes warnings
# errors. Names of other projects resolve through intersphinx where it has them offline (it has
# not: no network at build time), so they are written as plain code instead of references.
nitpicky = True
nitpick_ignore_regex = [
    # Types of other projects in signatures (no intersphinx inventories offline).
    ("py:class", r"(jax|optuna|ipyparallel|numpy|np|grain|collections\.abc|os|typing)\..*"),
    ("py:class", r"(datetime|threading)\..*"),
    ("py:class", r"(Any|Callable|Mapping|Sequence|Iterator|Iterable|PathLike|Literal|Platform|Mesh)"),
    ("py:class", r"(Source|BatchIterator|Failure)"),  # private types in public signatures, short form
    ("py:class", r"(optional|default .*|dict of .*|list of .*)"),
    ("py:class", r"jaxnb\._[\w.]+"),  # private types named in public signatures
    ("py:obj", r"jaxnb\._[\w.]+"),
    # Python's own exceptions in "Raises:" sections (no intersphinx inventory offline).
    ("py:exc", r"(ValueError|TypeError|RuntimeError|KeyError|LookupError|FileExistsError)"),
]
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

highlight_language = "none"  # literal blocks (a magic's usage) are not Python

html_theme = "sphinx_book_theme"
html_title = "jaxnb"
html_static_path: list[str] = []
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "use_download_button": False,
}
