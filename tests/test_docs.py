"""The docs site: it builds with no warning, its reference covers every public name and every
magic's flags, and its pages open in headless Chromium with no broken image or link.

The site is built once for these tests, with ``docs/build.py`` (what ``bash dev docs`` runs),
into ``docs/_build/html``. In a whole run these tests come last (tests/conftest.py), so the
tutorials they show are the ones this run executed (``tutorials/executed``).
"""

from __future__ import annotations

import dataclasses
import functools
import html
import http.server
import inspect
import pathlib
import posixpath
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator

import pytest
from support.factories import unavailable

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
SCREENSHOTS = ROOT / "docs" / "_build" / "screenshots"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import jaxnb_docs  # noqa: E402

import jaxnb  # noqa: E402


@pytest.fixture(scope="module")
def site() -> pathlib.Path:
    """The docs site, built afresh (a warning fails the build, and this fixture with it)."""
    built = subprocess.run([sys.executable, "docs/build.py"], cwd=ROOT, capture_output=True, text=True,
                           timeout=900)
    assert built.returncode == 0, (built.stdout + built.stderr)[-5000:]
    return SITE


def _inventory(site: pathlib.Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    return {name for kind, names in inventory.items() if kind.startswith("py:") for name in names}


def _public_members(cls: type) -> set[str]:
    """What users read on ``cls``: its fields, properties and methods, not jaxnb's own hooks."""
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for name, value in inspect.getmembers(cls):
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
            names.add(name)
    return {n for n in names if not n.startswith("_") and not jaxnb_docs.internal(getattr(cls, n, None))}


def public_names() -> set[str]:
    """Every public name: the package's exports, ``jaxnb.tune``'s, and what users read on the
    cluster and the result types."""
    names = {f"jaxnb.{n}" for n in jaxnb.__all__}
    names |= {f"jaxnb.tune.{n}" for n in jaxnb.tune.__all__}
    for cls in (jaxnb.JaxCluster, jaxnb.Result, jaxnb.TuneResult, jaxnb.ProfileResult, jaxnb.Checkpoint,
                jaxnb.ProcessInfo):
        names |= {f"jaxnb.{cls.__name__}.{m}" for m in _public_members(cls)}
    return names


def test_every_magic_has_a_declaration_for_its_help_and_its_reference():
    """A magic registered without a declaration would have no help and no reference page."""
    from jaxnb.magics.extension import DECLARATIONS, JaxnbMagics

    registered = {(kind, name) for kind, names in JaxnbMagics.magics.items() for name in names}
    assert registered == set(DECLARATIONS)


def test_every_package_export_is_listed_in_all():
    """``jaxnb.__all__`` is what the reference is checked against: it must hold every public name."""
    names = {n for n in dir(jaxnb) if not n.startswith("_")} - {"annotations", "Any", "TYPE_CHECKING"}
    exported = {n for n in names if not inspect.ismodule(getattr(jaxnb, n))} | {"tune"}  # not submodules
    assert exported == set(jaxnb.__all__)


def architecture_map() -> dict[str, str]:
    """The module map of docs/explanation/architecture.md: each package's path (``""`` for the
    top level, ``"_engine/boot/"``) and the text of its lines."""
    import re

    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text()
    block = page.split("```text\n", 1)[1].split("```", 1)[0]
    sections: dict[str, str] = {"": ""}
    parents: list[str] = []  # the package of each indentation level, outermost first
    current = ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        header = re.match(r"(\w+)/(\s|$)", line.lstrip())
        if header and indent % 2 == 0 and indent // 2 <= len(parents):
            parents = [*parents[: indent // 2], header.group(1)]
            current = "".join(f"{p}/" for p in parents)
            sections[current] = line.lstrip()[len(header.group(0)):]
        elif indent == 0:
            parents, current = [], ""
            sections[""] += "\n" + line
        else:
            sections[current] += "\n" + line
    return sections


def test_the_architecture_page_names_every_module():
    """Every module of the package is on the map, under its own package, so the map cannot drift."""
    import pkgutil
    import re

    sections = architecture_map()
    missing = []
    for module in pkgutil.walk_packages(jaxnb.__path__, "jaxnb."):
        parts = module.name.split(".")[1:]
        if module.ispkg:
            if "".join(f"{p}/" for p in parts) not in sections:
                missing.append(module.name)
            continue
        package = "".join(f"{p}/" for p in parts[:-1])
        name = f"{parts[-1]}.py" if not package else parts[-1]
        if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", sections.get(package, "")):
            missing.append(module.name)
    assert not missing, f"not on the map of docs/explanation/architecture.md: {missing}"


@pytest.mark.engines  # builds the site (tens of seconds)
def test_the_reference_documents_every_public_name(site):
    documented = _inventory(site)
    missing = sorted(n for n in public_names() if n not in documented and n != "jaxnb.tune")
    assert missing == []
    assert "jaxnb.tune" in documented  # the module page


@pytest.mark.engines
def test_the_reference_lists_every_magic_and_every_flag(site):
    from jaxnb.magics.kit import declared

    page = (site / "reference" / "magics.html").read_text()
    for title, declaration in jaxnb_docs.magic_sections():
        assert f">{title}<" in page, title
        for action in declared(declaration):
            for flag in action.option_strings:
                assert f"{flag}" in page, (title, flag)


def magic_labels(site: pathlib.Path) -> set[str]:
    """The reference targets (``{ref}`` labels) of the magics' sections in the built site."""
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        labels = InventoryFile.load(f, "", posixpath.join).get("std:label", {})
    return {name for name in labels if name.startswith("magic-")}


@pytest.mark.engines
def test_every_magic_is_a_reference_target(site):
    """The how-tos link each magic's section (``{ref}`%jax_train <magic-jax_train-line>```)."""
    expected = {f"magic-{title.strip('%')}-{'cell' if title.startswith('%%') else 'line'}"
                for title, _ in jaxnb_docs.magic_sections()}
    assert magic_labels(site) == expected


@pytest.mark.engines
def test_the_benchmarks_page_is_made_from_the_benches_results(site):
    results = sorted((ROOT / "bench" / "results").glob("*.json"))
    page = page_text((site / "benchmarks.html").read_text())
    assert results, "no bench has written bench/results/NAME.json"
    import json

    for path in results:
        result = json.loads(path.read_text())
        assert result["command"] in page and result["date"] in page, path.name
        for key, _ in jaxnb_docs.flat_figures(result["figures"]):
            assert key in page, (path.name, key)


def page_text(page: str) -> str:
    """What a reader sees of an HTML page: its text, tags dropped, each run of spaces one space
    (Sphinx writes ``python -m x`` in code as one ``<span>`` a word)."""
    import re

    text = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


def test_page_text_reads_code_as_the_reader_does():
    page = ('<code class="docutils literal notranslate"><span class="pre">python</span> '
            '<span class="pre">-m</span> <span class="pre">bench.x</span></code> a &amp; b')
    assert page_text(page) == "python -m bench.x a & b"


@pytest.fixture(scope="module")
def served(site) -> Iterator[str]:
    """The site over HTTP on loopback (as a reader's browser gets it)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    import shutil

    from playwright.sync_api import sync_playwright

    path = shutil.which("chromium") or "/usr/bin/chromium"
    unavailable("the docs' browser test", None if pathlib.Path(path).exists() else
                "chromium is not installed (apt-get install chromium; .ci/run does)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield browser
        browser.close()


def _local(href: str, page_url: str, root: str) -> str | None:
    """The URL of ``href`` on this site (without its fragment), or None for other sites."""
    target = urllib.parse.urljoin(page_url, href)
    return target.split("#")[0] if target.startswith(root) else None


@pytest.mark.engines
def test_every_page_opens_with_no_broken_image_or_link(site, served, chromium):
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if "_static" not in p.parts and "_sources" not in p.parts)
    assert len(pages) >= 15, pages
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    broken: dict[str, list[str]] = {}
    status: dict[str, int] = {}  # each local URL fetched once
    for name in pages:
        url = served + name
        response = page.goto(url)
        assert response is not None and response.ok, name
        images = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])")
        bad = [f"image {src}" for src, loaded in images if not loaded]
        for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))"):
            target = _local(href, url, served)
            if target is None:
                continue
            if target not in status:
                status[target] = page.request.get(target).status
            if status[target] != 200:
                bad.append(f"link {href}")
        if bad:
            broken[name] = bad
    assert broken == {}
    assert errors == []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, shot in (("index.html", "home.png"), ("reference/magics.html", "reference.png")):
        page.goto(served + name)
        page.screenshot(path=str(SCREENSHOTS / shot))
        assert (SCREENSHOTS / shot).stat().st_size > 10_000
    page.close()
