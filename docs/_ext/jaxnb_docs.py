"""Sphinx extension for jaxnb's docs: pages made from the code and from what CI produced.

- ``.. jaxnb-magics::`` renders every magic from its own declaration (the ``@argument``\\ s of
  ``magic_arguments``, or the docstring of a magic without flags), so the reference lists
  exactly the flags the magics accept.
- ``.. jaxnb-benchmarks::`` renders ``bench/results/*.json``, the files the benches write, with
  each figure's date, machine and command.
- Before reading the sources, the tutorials are copied in from ``tutorials/`` (the copies CI
  executed, ``tutorials/executed/``, where they exist; else the stored outputs), so the docs
  show real outputs without executing anything again.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import shutil
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DOCS)
TUTORIALS = os.path.join(ROOT, "tutorials")
RESULTS = os.path.join(ROOT, "bench", "results")


def copy_tutorials(app: Any) -> None:
    """``docs/tutorials/``: the tutorials' index and notebooks, as CI left them."""
    target = os.path.join(DOCS, "tutorials")
    os.makedirs(target, exist_ok=True)
    shutil.copyfile(os.path.join(TUTORIALS, "README.md"), os.path.join(target, "index.md"))
    for stored in sorted(glob.glob(os.path.join(TUTORIALS, "[0-9][0-9]_*.ipynb"))):
        name = os.path.basename(stored)
        executed = os.path.join(TUTORIALS, "executed", name)
        source = executed if os.path.exists(executed) else stored
        shutil.copyfile(source, os.path.join(target, name))


def _rst(directive: Directive, lines: list[str]) -> list[nodes.Node]:
    """Parse ``lines`` (reStructuredText, section titles included) in place of the directive."""
    from sphinx.util.nodes import nested_parse_with_titles

    holder = nodes.section()
    holder.document = directive.state.document
    nested_parse_with_titles(directive.state, StringList(lines, source="jaxnb_docs"), holder)
    return list(holder.children)


def _indent(text: str, by: str = "   ") -> list[str]:
    return [by + line if line.strip() else "" for line in text.splitlines()]


def magic_sections() -> list[tuple[str, Any]]:
    """(``%name`` or ``%%name``, its declaration) for every magic, in the front's order."""
    from jaxnb.magics.extension import DECLARATIONS

    return [(("%%" if kind == "cell" else "%") + name, declared)
            for (kind, name), declared in DECLARATIONS.items()]


def _flag_rows(declared: Any) -> list[tuple[str, str]]:
    from jaxnb.magics.kit import declared as declared_actions

    rows = []
    for action in reversed(declared_actions(declared)):  # decorators apply bottom up
        if action.option_strings:
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            flags = ", ".join(f"``{flag}{metavar}``" for flag in action.option_strings)
        else:
            flags = f"``{action.metavar or action.dest.upper()}``"
        help_text = _escaped((action.help or "").replace("%%", "%"))
        if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
            help_text += f" (default: ``{action.default}``)"
        rows.append((flags, help_text.replace("\n", " ")))
    return rows


def _escaped(text: str) -> str:
    """``text`` as plain reStructuredText (``'*.ckpt'`` is not the start of emphasis)."""
    for special in ("\\", "*", "`", "|", "_"):
        text = text.replace(special, "\\" + special)
    return text


class MagicsDirective(Directive):
    """Every magic: its usage line, what it does, and a table of every flag it takes."""

    def run(self) -> list[nodes.Node]:
        # One parse a magic: in a single parse only the first label became a reference target
        # (``{ref}`%jax_train <magic-jax_train-line>``` from another page then did not resolve).
        sections: list[nodes.Node] = []
        for title, declared in magic_sections():
            doc = _own_docstring(declared)
            lines = [f".. _magic-{title.strip('%')}-{'cell' if title.startswith('%%') else 'line'}:",
                     "", title, "-" * len(title), ""]
            lines += [*doc.splitlines(), ""]
            rows = _flag_rows(declared)
            if rows:
                lines += [".. list-table::", "   :header-rows: 1", "   :widths: 35 65", "",
                          "   * - flag", "     - what it does"]
                for flags, text in rows:
                    lines += [f"   * - {flags}", f"     - {text or ' '}"]
                lines.append("")
            sections += _rst(self, lines)
        return sections


def _own_docstring(declared: Any) -> str:
    """The magic's own words: a ``magic_arguments`` help keeps them between the usage block and
    the argparse listing; a magic without flags is its docstring."""
    import inspect

    doc = inspect.cleandoc(declared.__doc__ or "")
    if doc.startswith("::"):  # IPython's usage block, then the docstring, then argparse's lists
        blocks = doc.split("\n\n")
        usage = blocks[0]
        words = [b for b in blocks[1:] if not b.startswith(("positional arguments:", "options:",
                                                            "optional arguments:"))]
        return usage + "\n\n" + "\n\n".join(words)
    return doc


class BenchmarksDirective(Directive):
    """Every bench's last recorded run: what it measured, against what, when, where, how."""

    def run(self) -> list[nodes.Node]:
        lines: list[str] = []
        for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
            with open(path) as f:
                result = json.load(f)
            lines += benchmark_section(result)
        if not lines:
            lines = ["No bench has recorded a run yet (``python -m bench.NAME`` writes "
                     "``bench/results/NAME.json``)."]
        return _rst(self, lines)


def benchmark_section(result: dict[str, Any]) -> list[str]:
    """One bench's run as reStructuredText: a title, where and how it ran, a table of figures."""
    name = result["bench"]
    machine = result.get("machine", {})
    where = ", ".join(f"{k} {v}" for k, v in machine.items())
    load = result.get("load_average", {})
    lines = [name, "-" * len(name), "", bench_title(name), "",
             f"- **run:** ``{result['command']}``",
             f"- **when:** {result['date']}",
             f"- **machine:** {where or 'not recorded'}"]
    for moment in ("start", "end"):
        if load.get(moment):
            lines.append(f"- **load average at the {moment}:** "
                         + " / ".join(f"{x:.2f}" for x in load[moment]))
    lines += ["", ".. list-table::", "   :header-rows: 1", "", "   * - figure", "     - value"]
    for key, value in flat_figures(result["figures"]):
        lines += [f"   * - {key}", f"     - {shown(value)}"]
    return [*lines, ""]


def bench_title(name: str) -> str:
    """The first line of ``bench/NAME.py``'s docstring: what the bench compares."""
    try:
        with open(os.path.join(ROOT, "bench", f"{name}.py")) as f:
            doc = ast.get_docstring(ast.parse(f.read())) or ""
    except OSError:
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def flat_figures(figures: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A bench's figures (nested JSON) as ``(a / b / c, value)`` rows, in the bench's order."""
    if isinstance(figures, dict):
        rows: list[tuple[str, Any]] = []
        for key, value in figures.items():
            name = str(key).strip()
            rows += flat_figures(value, f"{prefix} / {name}" if prefix else name)
        return rows
    return [(prefix, figures)]


def shown(value: Any) -> str:
    """A figure as text: numbers to 4 significant digits, lists joined."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(shown(v) for v in value) or "—"
    return str(value).replace("\n", " ") or "—"


#: A docstring that starts so marks a method jaxnb itself calls (``Result.add_report``): public
#: by name, for the modules that fill the object in, but not for users.
INTERNAL = "(jaxnb)"


def internal(obj: Any) -> bool:
    """Whether ``obj`` is one of jaxnb's own hooks (its docstring starts with ``(jaxnb)``)."""
    return (getattr(obj, "__doc__", None) or "").lstrip().startswith(INTERNAL)


def skip_internal(app: Any, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    """autodoc: leave jaxnb's own hooks out of the reference."""
    return True if internal(obj) else None


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", copy_tutorials)
    app.connect("autodoc-skip-member", skip_internal)
    app.add_directive("jaxnb-magics", MagicsDirective)
    app.add_directive("jaxnb-benchmarks", BenchmarksDirective)
    return {"parallel_read_safe": True, "version": "1"}
