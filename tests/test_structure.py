"""The package's shape: no import cycle, engine code only on the engines, no JAX in the kernel."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxnb"
#: Modules that run in the notebook kernel may import these engine-neutral modules only.
SHARED = {"jaxnb._core.contract", "jaxnb._core.run_folder", "jaxnb._core.host_entries"}
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


def test_the_notebook_side_never_loads_jax_or_orbax():
    """Importing every notebook-side module (magics, training driver, widgets) loads no JAX:
    on a TPU VM only one process may own the chips, and it is an engine."""
    notebook = sorted(m for m in _modules() if not m.startswith("jaxnb._engine") and m != "jaxnb._mesh")
    code = (
        "import importlib, sys\n"
        f"for name in {notebook!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in ('jax', 'jaxlib', 'orbax', 'orbax.checkpoint') if m in sys.modules)\n"
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
print("LOADED", sorted(m for m in ("jax", "jaxlib", "orbax", "orbax.checkpoint") if m in sys.modules))
"""


def test_a_training_run_loads_no_jax_in_the_notebook(tmp_path):
    """The kernel renders what engines describe: cells, training and checkpoints load no JAX."""
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_WITHOUT_JAX, str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "LOADED []" in out.stdout
