"""The package's shape: no import cycle, engine code only on the engines, no JAX in the kernel."""

from __future__ import annotations

import ast
import functools
import io
import pathlib
import re
import subprocess
import sys
import tokenize

import pytest
from support.sources import parsed

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxnb"
#: The engine-neutral modules of ``_core`` that engine code may import (the notebook imports them too).
SHARED = {"jaxnb._core.contract", "jaxnb._core.run_folder", "jaxnb._core.host_entries",
          "jaxnb._core.messages", "jaxnb._core.sent_functions", "jaxnb._core.spelling",
          "jaxnb._core.tracebacks", "jaxnb._core.cxx_log", "jaxnb._core.safe_files",
          "jaxnb._core.optional", "jaxnb._core.ipykernel_internals",
          "jaxnb._core.run_reports"}
#: Engine-side public API (``jaxnb.report``, ``jaxnb.show_mesh``): called inside cells.
ENGINE_API = {"jaxnb", "jaxnb._mesh"}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    """:func:`_imports` of the whole package (shared: never change it)."""
    return _imports(_modules())


def _imports(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Every jaxnb module each module imports, wherever the import stands."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    prefix = ".".join(package[: len(package) - node.level + 1])
                    base = f"{prefix}.{base}" if node.module else prefix
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target) if target.startswith("jaxnb") else None
                if found and found != module and not module.startswith(found + "."):
                    graph[module].add(found)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, or [] (depth-first search)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    assert len(graph) > 40
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_notebook_modules_do_not_import_engine_code():
    graph = _graph()
    notebook = [m for m in graph if not m.startswith("jaxnb._engine") and m not in ENGINE_API | SHARED]
    offenders = {m: sorted(t for t in graph[m] if t.startswith("jaxnb._engine")) for m in notebook}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_engine_code_does_not_import_notebook_code():
    graph = _graph()
    engine = [m for m in graph if m.startswith("jaxnb._engine")]
    allowed = SHARED | {m for m in graph if m.startswith("jaxnb._engine")}
    offenders = {m: sorted(graph[m] - allowed) for m in engine}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_cells_do_not_import_the_stack_dump_reader():
    """Cell identity (the hash in a cell's file name, its compiled text) is ``_core.notebook_cells``."""
    graph = _graph()
    cells = [m for m in graph if m.startswith("jaxnb._cells")]
    assert [m for m in cells if "jaxnb._failures.stacks" in graph[m]] == []


@pytest.mark.engines  # imports every module in a fresh interpreter (seconds)
def test_the_notebook_side_never_loads_jax_or_orbax():
    """Importing every notebook-side module (magics, training driver, widgets) loads no JAX:
    on a TPU VM only one process may own the chips, and it is an engine."""
    notebook = sorted(m for m in _modules() if not m.startswith("jaxnb._engine") and m != "jaxnb._mesh")
    code = (
        "import importlib, sys\n"
        f"for name in {notebook!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in ('jax', 'jaxlib', 'orbax', 'orbax.checkpoint', 'grain')\n"
        "             if m in sys.modules)\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


TRAIN_WITHOUT_JAX = r"""
import sys, jaxnb

def train(config):
    import jaxnb
    for step in range(3):
        jaxnb.report({"loss": 1.0 / (step + 1)}, checkpoint={"w": [step]} if step == 2 else None)

with jaxnb.JaxCluster(n=2) as cluster:
    cluster.run("import jax; x = jax.process_index()")
    result = cluster.train(train, {}, storage=sys.argv[1])
    assert result.error is None and len(result.history) == 3, result
    assert result.checkpoint.step == 3, result.checkpoint  # steps count reports from 1
print("LOADED", sorted(m for m in ("jax", "jaxlib", "orbax", "orbax.checkpoint", "grain")
                       if m in sys.modules))
"""


@pytest.mark.engines
def test_a_training_run_loads_no_jax_in_the_notebook(tmp_path):
    """The kernel renders what engines describe: cells, training and checkpoints load no JAX."""
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_WITHOUT_JAX, str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "LOADED []" in out.stdout


#: The layers, bottom up: each package may import itself and the packages listed for it.
#: The fronts (``TOP``) sit above every package. An import not allowed here is an arrow upward
#: (or sideways).
LAYERS: dict[str, set[str]] = {
    "jaxnb._core": set(),
    "jaxnb._engine": {"jaxnb._core"},
    "jaxnb._widgets": {"jaxnb._core"},
    "jaxnb._hosts": {"jaxnb._core"},
    "jaxnb._failures": {"jaxnb._core", "jaxnb._hosts"},
    "jaxnb._lifecycle": {"jaxnb._core", "jaxnb._hosts", "jaxnb._failures"},
    "jaxnb._attach": {"jaxnb._core"},
    "jaxnb._debug": {"jaxnb._core", "jaxnb._failures", "jaxnb._widgets"},
    "jaxnb._cells": {"jaxnb._core", "jaxnb._failures", "jaxnb._debug"},
    "jaxnb._train": {"jaxnb._core", "jaxnb._failures", "jaxnb._cells", "jaxnb._widgets", "jaxnb._debug",
                     "jaxnb._attach"},
    "jaxnb._profile": {"jaxnb._core", "jaxnb._failures", "jaxnb._cells", "jaxnb._widgets", "jaxnb._train"},
    "jaxnb._tune": {"jaxnb._core", "jaxnb._failures", "jaxnb._train", "jaxnb._widgets"},
}
#: The fronts, modules or packages: the engine API (``jaxnb``, ``_mesh``), the Python API
#: (``_cluster`` and its ``_cluster_jobs``, ``_cluster_options``, ``tune``), the magics, and
#: ``show_notebook``.
TOP = {"jaxnb", "jaxnb.__main__", "jaxnb._cluster", "jaxnb._cluster_attach", "jaxnb._cluster_driving",
       "jaxnb._cluster_inspect",
       "jaxnb._cluster_jobs",
       "jaxnb._cluster_options", "jaxnb._cluster_restarts", "jaxnb._mesh",
       "jaxnb.magics", "jaxnb.show_notebook", "jaxnb.tune"}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_every_module_has_a_layer():
    unplaced = [m for m in _modules() if _package(m) not in TOP and _package(m) not in LAYERS]
    assert unplaced == [], "add new packages to LAYERS (and the map in docs/explanation/architecture.md)"


def test_no_import_goes_up_a_layer():
    graph = _graph()
    upward = {}
    for module, targets in graph.items():
        own = _package(module)
        if own in TOP:
            continue
        allowed = LAYERS[own] | {own}
        bad = sorted(t for t in targets if _package(t) in TOP or _package(t) not in allowed)
        if bad:
            upward[module] = bad
    assert upward == {}


def test_the_layer_table_has_no_cycle():
    assert _cycle({k: set(v) for k, v in LAYERS.items()}) == []


#: The most lines of code a module may hold (docstrings, comments and blank lines not counted:
#: prose is never cut to meet a count).
MAX_CODE_LINES = 350


def code_lines(source: str) -> int:
    """How many lines of ``source`` hold code: not blank, not only a comment, not a docstring."""
    prose: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                prose.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.ENCODING}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - prose)


COUNTED = '''"""A module docstring

of three lines."""

# a comment
import os  # code with a comment
TEXT = """a string
that is data"""


class A:
    """Docstring."""

    def f(self, x):
        """Two
        lines."""
        return (x +
                1)
'''


def test_code_lines_count_code_not_prose():
    # the import, both lines of TEXT, the class, the def and both lines of the return
    assert code_lines(COUNTED) == 7


def test_no_module_is_long():
    long = {m: n for m, p in _modules().items() if (n := code_lines(p.read_text())) > MAX_CODE_LINES}
    assert long == {}, f"split modules over {MAX_CODE_LINES} lines of code into one concept each"


#: Basenames that several packages use for the same job, each for its own concept (a
#: package's ``magic`` front, its ``options``, its ``result`` type).
SAME_JOB = {"__init__", "magic", "options", "result"}


def test_no_two_modules_share_a_basename():
    """A name says one job: ``stacks`` on the engine (dump) and in the notebook (read) was two."""
    paths: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        paths.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE.parent)))
    shared = {name: where for name, where in paths.items() if len(where) > 1 and name not in SAME_JOB}
    assert shared == {}


def _engine_calls() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "EngineCall"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                found.add(node.args[0].value)
    return found


def test_every_engine_call_names_a_function_that_exists():
    modules = _modules()
    calls = _engine_calls()
    assert len(calls) > 10
    missing = []
    for target in sorted(calls):
        module, _, name = target.partition(":")
        path = modules.get(module)
        defined = set()
        if path is not None:
            tree = parsed(path)
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        if not module.startswith("jaxnb._engine.") or name not in defined:
            missing.append(target)
    assert missing == []


#: ``jaxnb._engine.group.process`` or ``…process:initialize`` or ``…process.initialize``.
_ENGINE_PATH = re.compile(r"jaxnb\._engine(?:\.[A-Za-z_]\w*)*(?::\w+)?")


def _top_level_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in parsed(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for tgt in targets for n in ast.walk(tgt) if isinstance(n, ast.Name))
    return names


def unknown_engine_paths(text: str, modules: dict[str, pathlib.Path]) -> list[str]:
    """The engine paths in ``text`` that name no module (or no name defined in their module)."""
    bad = []
    for written in _ENGINE_PATH.findall(text):
        dotted = written.replace(":", ".")
        module = dotted
        while module not in modules and "." in module:
            module = module.rpartition(".")[0]
        rest = dotted[len(module) + 1:].split(".") if dotted != module else []
        if module not in modules or (rest and rest[0] not in _top_level_names(modules[module])):
            bad.append(written)
    return bad


def test_every_engine_path_written_down_exists():
    """Entry command lines (``python -c "from jaxnb._engine.boot.main import main"``), module
    names in docstrings and the README: every ``jaxnb._engine…`` path names what is there."""
    modules = _modules()
    root = PACKAGE.parent
    texts = [*PACKAGE.rglob("*.py"), *(root / "bench").glob("*.py"), root / "README.md",
             *(root / "docs").rglob("*.md")]
    bad = {str(p.relative_to(root)): b for p in texts if (b := unknown_engine_paths(p.read_text(), modules))}
    assert bad == {}


def test_a_wrong_engine_path_is_found():
    modules = _modules()
    assert unknown_engine_paths("python -m jaxnb._engine.boot.main; jaxnb._engine.run", modules) == []
    assert unknown_engine_paths("jaxnb._engine.group.process:initialize", modules) == []
    assert unknown_engine_paths("from jaxnb._engine.main import main", modules) == ["jaxnb._engine.main"]
    assert unknown_engine_paths("jaxnb._engine.group.process:start", modules) == [
        "jaxnb._engine.group.process:start"]

ENGINE_SIDE_IMPORT = (
    "import sys, jaxnb, jaxnb._engine.run.reporting, jaxnb._engine.group.process\n"
    "heavy = ('matplotlib', 'ipywidgets', 'ipyparallel', 'IPython', 'jaxnb._cluster', 'jaxnb._train')\n"
    "print(sorted(m for m in heavy if m in sys.modules))\n"
)


def test_import_jaxnb_loads_only_the_engine_side():
    """Every engine imports ``jaxnb``: the notebook side (JaxCluster, widgets) loads on use."""
    out = subprocess.run([sys.executable, "-c", ENGINE_SIDE_IMPORT], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def test_the_notebook_side_loads_on_first_use():
    code = "import jaxnb, sys; jaxnb.JaxCluster; jaxnb.Result; print('jaxnb._cluster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr[-3000:]


LOAD_EXT = (
    "import sys, IPython, jaxnb, jaxnb.magics\n"
    "heavy = ('jaxnb._cluster', 'jaxnb._hosts', 'jaxnb._engine', 'jaxnb._cells', 'ipyparallel',\n"
    "         'ipywidgets', 'matplotlib', 'numpy', 'optuna', 'orbax', 'jax')\n"
    "print(sorted(m for m in heavy if m in sys.modules))\n"
)


def test_load_ext_jaxnb_loads_only_the_magics():
    """``%load_ext jaxnb`` (and ``import jaxnb``) load no cluster machinery, engine side or
    plotting: an attach or a start in a fresh kernel pays only for what it uses (issue 42)."""
    out = subprocess.run([sys.executable, "-c", LOAD_EXT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"
