"""The docs as they read in the repository (on GitHub, in a checkout), with no build: links
lead to files that exist and never into a folder the build makes, no MyST role shows raw, the
generated Markdown reference is up to date, and the troubleshooting page quotes messages
jaxnb really raises."""

from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import jaxnb_docs  # noqa: E402
from test_docs import public_names  # noqa: E402

GENERATED_FOLDERS = ("docs/tutorials/", "docs/_build/", "tutorials/executed/")
MYST_SYNTAX = re.compile(r"\{(?:ref|class|meth|func|attr|exc|mod|obj|doc|image|py:\w+)\}`|```\{[\w-]+\}")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<img[^>]*\ssrc=\"([^\"]+)\"")


def repository_pages() -> list[pathlib.Path]:
    """The Markdown pages a reader opens in the repository: the README, the docs' pages (not
    the site forms of docs/_site, nor what the build makes) and the tutorials' index."""
    pages = [ROOT / "README.md", ROOT / "tutorials" / "README.md", ROOT / "binder" / "README.md"]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        relative = page.relative_to(ROOT).as_posix()
        if not relative.startswith((*GENERATED_FOLDERS, "docs/_site/")):
            pages.append(page)
    return pages


def local_links(page: pathlib.Path) -> list[str]:
    """The page's links and image sources that lead into the repository (anchors dropped)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks are not links
    targets = [a or b for a, b in LINK.findall(text)]
    return [t.split("#")[0] for t in targets if t.split("#")[0] and not re.match(r"\w+:", t)]


def test_repository_pages_link_only_to_files_of_the_repository_and_none_generated():
    problems = []
    for page in repository_pages():
        for target in local_links(page):
            path = (page.parent / target).resolve()
            relative = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            if relative.startswith(GENERATED_FOLDERS):
                problems.append(f"{page.relative_to(ROOT)}: {target} is in a folder the build makes")
            elif not path.exists():
                problems.append(f"{page.relative_to(ROOT)}: {target} does not exist")
    assert problems == []


def test_local_links_finds_links_images_and_skips_code_and_urls(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('[a](x.md#y) ![b](img/c.png) <img src="d.png" width="3"> [e](https://f/g.md)\n'
                    "```\n[h](in_code.md)\n```\n[i](#anchor)\n")
    assert local_links(page) == ["x.md", "img/c.png", "d.png"]


def test_no_myst_role_or_directive_shows_raw_in_the_repository_pages():
    """On GitHub a ``{ref}`` role or a ```` ```{image} ```` block shows as raw text."""
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
             for page in repository_pages()
             for n, line in enumerate(page.read_text().splitlines(), 1) if MYST_SYNTAX.search(line)]
    assert found == []


def test_myst_syntax_is_recognised():
    for raw in ("see {class}`jaxnb.Result`", "{ref}`x <magic-a>`", "```{image} a.png", "```{eval-rst}",
                "```{toctree}", "{meth}`~jaxnb.JaxCluster.run`"):
        assert MYST_SYNTAX.search(raw), raw
    assert not MYST_SYNTAX.search("a dict {'lr': 1} and `code` and ```python")


def test_the_markdown_forms_of_the_generated_pages_are_up_to_date():
    """docs/reference/*.md and docs/benchmarks.md are made from docs/_site/ and the code by
    ``bash dev docs``; a change to a docstring, a magic's flags or a bench result needs them
    made again."""
    import jaxnb_markdown

    pages = jaxnb_markdown.pages()
    assert {pathlib.Path(p).relative_to(ROOT).as_posix() for p in pages} >= {
        "docs/reference/magics.md", "docs/reference/cluster.md", "docs/benchmarks.md"}
    stale = [pathlib.Path(p).relative_to(ROOT).as_posix() for p, text in pages.items()
             if not pathlib.Path(p).exists() or pathlib.Path(p).read_text() != text]
    assert stale == [], "run `bash dev docs` (or python docs/_ext/jaxnb_markdown.py) and commit them"


def test_the_markdown_reference_lists_every_public_name_and_every_flag():
    from jaxnb.magics.kit import declared

    text = "\n".join((ROOT / "docs" / "reference" / f"{n}.md").read_text()
                     for n in ("magics", "cluster", "engine", "results", "tune", "errors"))
    missing = [name for name in sorted(public_names())
               if f"`{name}`" not in text and f"`{name.split('.', 1)[1]}`" not in text
               and f"`{name.rsplit('.', 1)[-1]}`" not in text]
    assert missing == []
    for title, declaration in jaxnb_docs.magic_sections():
        assert f"## `{title}`" in text
        for action in declared(declaration):
            for flag in action.option_strings:
                assert f"`{flag}" in text, (title, flag)


def message_skeletons() -> list[str]:
    """Every string literal in jaxnb/, with each value an f-string or ``str.format`` fills in
    written ``…`` (implicitly joined literals are one string, as Python parses them)."""
    skeletons = []
    for path in (ROOT / "jaxnb").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                skeletons.append("".join(v.value if isinstance(v, ast.Constant) else "…"
                                         for v in node.values))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                skeletons.append(re.sub(r"\{[^{}]*\}", "…", node.value))
    return skeletons


def documented_messages() -> list[str]:
    page = (ROOT / "docs" / "howto" / "troubleshooting.md").read_text()
    return re.findall(r"^\*\*Message:\*\* `(.+)`$", page, re.M)


def test_every_troubleshooting_message_is_one_jaxnb_raises():
    messages = documented_messages()
    assert len(messages) >= 15
    skeletons = message_skeletons()
    missing = [m for m in messages if not any(m in s for s in skeletons)]
    assert missing == [], "not in jaxnb/: reword the entry as the code says it, with … for values"


def test_message_skeletons_write_filled_values_as_ellipses():
    skeletons = message_skeletons()
    assert any("only … of … engines registered within " in s for s in skeletons)
    assert any(s.startswith("the engines are busy with the background training run …;") for s in skeletons)
    assert not any("an entry nobody wrote in jaxnb" in s for s in skeletons)


def test_site_links_lead_to_the_site_copies_of_tutorials_and_name_files_outside_the_docs():
    import jaxnb_pages

    page = ("[t](../../tutorials/03_x.ipynb) [i](../../tutorials/README.md) [c](cluster.md#a) "
            "![p](../images/a.png) [r](../../README.md#install) [w](https://x/y.md)")
    assert jaxnb_pages.site_links(page, "howto/training") == (
        "[t](../tutorials/03_x.ipynb) [i](../tutorials/index.md) [c](cluster.md#a) "
        "![p](../images/a.png) r (`README.md` in the repository) [w](https://x/y.md)")
    # the tutorials' index lives in tutorials/README.md but is built as docs/tutorials/index.md
    assert jaxnb_pages.site_links("[n](01_q.ipynb) [d](../docs/howto/cluster.md)", "tutorials/index") == (
        "[n](01_q.ipynb) [d](../howto/cluster.md)")


def test_toctree_comments_become_toctrees():
    import jaxnb_pages

    text = "# T\n\n<!-- toctree hidden maxdepth=1\na\nb/index\n-->\n"
    assert jaxnb_pages.toctrees(text) == "# T\n\n```{toctree}\n:hidden:\n:maxdepth: 1\n\na\nb/index\n```\n"


def test_a_magics_usage_is_wrapped_the_same_whatever_the_terminal():
    import jaxnb_markdown

    narrow = "  %m [-n N] [--platform cpu|gpu]\n      [--hosts H1,H2] [command]"
    wide = "  %m [-n N] [--platform cpu|gpu] [--hosts H1,H2] [command]"
    assert jaxnb_markdown.usage(narrow, width=30) == jaxnb_markdown.usage(wide, width=30) == (
        "    %m [-n N]\n        [--platform cpu|gpu]\n        [--hosts H1,H2]\n        [command]")


def test_docstrings_become_markdown_sections_lists_and_fenced_code():
    import jaxnb_markdown

    def f():
        """Do it, see :meth:`start` and ``x``.

        Args:
            a: the first,
                continued.

        Example::

            f(1)
        """

    assert jaxnb_markdown.docstring(f) == (
        "Do it, see `start` and `x`.\n\n**Args:**\n\n- a: the first, continued.\n\n"
        "Example:\n\n```python\nf(1)\n```")
