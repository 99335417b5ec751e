"""The package's shape: no import cycle, engine code only on the engines, no JAX in the kernel."""

from __future__ import annotations

import ast
import io
import pathlib
import subprocess
import sys
import tokenize

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxnb"
#: Modules that run in the notebook kernel may import these engine-neutral modules only.
SHARED = {"jaxnb._core.contract", "jaxnb._core.run_folder", "jaxnb._core.host_entries",
          "jaxnb._core.messages"}
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


def _imports(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Every jaxnb module each module imports, wherever the import stands."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
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
    graph = _imports(_modules())
    assert len(graph) > 40
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_notebook_modules_do_not_import_engine_code():
    graph = _imports(_modules())
    notebook = [m for m in graph if not m.startswith("jaxnb._engine") and m not in ENGINE_API | SHARED]
    offenders = {m: sorted(t for t in graph[m] if t.startswith("jaxnb._engine")) for m in notebook}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_engine_code_does_not_import_notebook_code():
    graph = _imports(_modules())
    engine = [m for m in graph if m.startswith("jaxnb._engine")]
    allowed = SHARED | {m for m in graph if m.startswith("jaxnb._engine")}
    offenders = {m: sorted(graph[m] - allowed) for m in engine}
    assert {m: t for m, t in offenders.items() if t} == {}


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
#: Top-level modules (``jaxnb``, ``_cluster``, ``_mesh``, ``magics``, ``show_notebook``) sit
#: above every package. An import not allowed here is an arrow upward (or sideways).
LAYERS: dict[str, set[str]] = {
    "jaxnb._core": set(),
    "jaxnb._engine": {"jaxnb._core"},
    "jaxnb._widgets": {"jaxnb._core"},
    "jaxnb._hosts": {"jaxnb._core"},
    "jaxnb._failures": {"jaxnb._core", "jaxnb._hosts"},
    "jaxnb._lifecycle": {"jaxnb._core", "jaxnb._hosts", "jaxnb._failures"},
    "jaxnb._cells": {"jaxnb._core", "jaxnb._failures"},
    "jaxnb._train": {"jaxnb._core", "jaxnb._failures", "jaxnb._cells", "jaxnb._widgets"},
    "jaxnb._profile": {"jaxnb._core", "jaxnb._failures", "jaxnb._cells", "jaxnb._widgets", "jaxnb._train"},
    "jaxnb._tune": {"jaxnb._core", "jaxnb._failures", "jaxnb._train", "jaxnb._widgets"},
}
#: ``_train.magic`` is the ``%jax_train`` front: it picks the trainer (plain, or profiled by _profile).
TOP = {"jaxnb", "jaxnb._cluster", "jaxnb._cluster_options", "jaxnb._mesh", "jaxnb.magics",
       "jaxnb._magic_args", "jaxnb.show_notebook", "jaxnb.tune", "jaxnb._train.magic"}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_every_module_has_a_layer():
    unplaced = [m for m in _modules() if m not in TOP and _package(m) not in LAYERS]
    assert unplaced == [], "add new packages to LAYERS (and the README's map)"


def test_no_import_goes_up_a_layer():
    graph = _imports(_modules())
    upward = {}
    for module, targets in graph.items():
        if module in TOP:
            continue
        own = _package(module)
        allowed = LAYERS[own] | {own}
        bad = sorted(t for t in targets if t in TOP or _package(t) not in allowed)
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


def _engine_calls() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
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
            tree = ast.parse(path.read_text())
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        if not module.startswith("jaxnb._engine.") or name not in defined:
            missing.append(target)
    assert missing == []


ENGINE_SIDE_IMPORT = (
    "import sys, jaxnb, jaxnb._engine.reporting, jaxnb._engine.process\n"
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
