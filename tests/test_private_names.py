"""Other libraries' private names are read only in jaxnb's ``*_internals.py`` adapters.

An AST scan of every module of the package (milliseconds, nothing started). Outside the
adapters it fails on:

- an import of a private module of another library (``from jax._src import …``,
  ``import ipykernel._x``) or of a private name from one (``from jax.lib import _jax``);
- an attribute read, write or ``getattr``/``setattr``/``hasattr`` of a ``_name`` that jaxnb
  itself never defines (as a function, class, module, attribute assigned, parameter or
  keyword), on any object: such a name belongs to another library's object.

``ALLOWED`` lists the exceptions, each with its reason: the standard library's documented
underscore names, and ``SUBCLASS_HOOKS``: protected methods that a jaxnb subclass of another
library's class calls on itself (ipyparallel's ssh launchers, pdb), which no adapter can wrap
without re-implementing the class; the ssh lab's and the debugger's engine tests cover them.

A name jaxnb defines itself counts as jaxnb's own anywhere: a library's private name that
jaxnb happens to define too is not caught (the scan's known blind spot).
"""

from __future__ import annotations

import ast
import pathlib

from support.sources import parsed

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jaxnb"
#: Underscore names of the standard library that are documented API, not private parts.
ALLOWED = {
    "_exit": "os._exit: documented (exit without cleanup, after fork or in a signal handler)",
    "_getframe": "sys._getframe: documented CPython API",
    "_current_frames": "sys._current_frames: documented CPython API (stack dumps)",
    "_replace": "namedtuple._replace: documented namedtuple API",
    "_asdict": "namedtuple._asdict: documented namedtuple API",
    "_fields": "namedtuple._fields: documented namedtuple API",
    "_make": "namedtuple._make: documented namedtuple API",
}
#: (module, name): a protected method of another library's class, called by jaxnb's subclass of
#: it on itself (see the module's docstring).
SUBCLASS_HOOKS = {
    ("jaxnb/_hosts/ssh.py", "_start_waiting"): "ipyparallel SSHEngineLauncher: poll the remote pid",
    ("jaxnb/_hosts/ssh.py", "_notice_engine_stopped"): "ipyparallel SSHEngineSetLauncher's stop hook",
    ("jaxnb/_engine/debug/console.py", "_getval"): "pdb.Pdb: evaluate p/pp's argument as pdb does",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _modules() -> dict[pathlib.Path, ast.Module]:
    return {path: parsed(path) for path in sorted(PACKAGE.rglob("*.py"))}


def own_names(trees: dict[pathlib.Path, ast.Module]) -> set[str]:
    """Every underscore name jaxnb defines somewhere (so reading it is reading jaxnb's own)."""
    names = {p.stem for p in trees} | {p.name for p in PACKAGE.rglob("*") if p.is_dir()}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return {n for n in names if _private(n)}


def violations(path: pathlib.Path, tree: ast.Module, own: set[str]) -> list[str]:
    """Where ``tree`` reads another library's private names (see the module's docstring)."""
    found = []
    module = str(path.relative_to(PACKAGE.parent))
    own = own | {name for where, name in SUBCLASS_HOOKS if where == module}

    def at(node: ast.AST, what: str) -> None:
        found.append(f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "jaxnb" and any(_private(p) for p in parts):
                    at(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] in ("jaxnb", "__future__"):
                continue
            if any(_private(p) for p in parts):
                at(node, f"from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    at(node, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr not in own and node.attr not in ALLOWED:
                at(node, f".{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
            if _private(name) and name not in own and name not in ALLOWED:
                at(node, f'{node.func.id}(..., "{name}")')
    return found


def test_only_the_adapters_read_other_libraries_private_names():
    trees = _modules()
    own = own_names(trees)
    found = [line for path, tree in trees.items() if not path.name.endswith("_internals.py")
             for line in violations(path, tree, own)]
    assert not found, ("other libraries' private names outside the *_internals.py adapters "
                       "(move the read into an adapter, guarded):\n" + "\n".join(found))


def _scan(source: str, own: frozenset[str] = frozenset()) -> list[str]:
    return violations(PACKAGE / "example.py", ast.parse(source), set(own))


def test_the_scan_finds_each_kind_of_private_read():
    assert _scan("from jax._src import compiler") == ["jaxnb/example.py:1: from jax._src import ..."]
    assert _scan("import jax._src.util") == ["jaxnb/example.py:1: import jax._src.util"]
    assert _scan("from jax.lib import _jax") == ["jaxnb/example.py:1: from jax.lib import _jax"]
    assert _scan("x = ar._children") == ["jaxnb/example.py:1: ._children"]
    assert _scan("getattr(ar, '_children', None)") == ['jaxnb/example.py:1: getattr(..., "_children")']
    assert _scan("s._original_stdstream_copy = 3") == ["jaxnb/example.py:1: ._original_stdstream_copy"]


def test_the_scan_lets_jaxnb_read_its_own_names_and_documented_ones():
    assert _scan("self._lock.acquire()", frozenset({"_lock"})) == []
    assert _scan("from jaxnb._core import optional\nimport jaxnb._engine.boot") == []
    assert _scan("import os, sys\nos._exit(1)\nsys._getframe(0)\nt._replace(a=1)") == []
    assert _scan("from __future__ import annotations") == []


def test_own_names_include_what_jaxnb_assigns_and_defines():
    own = own_names({PACKAGE / "m.py": ast.parse(
        "class _A:\n    def _f(self, _x):\n        self._y = 1\n_z = 2\nimport a as _b\n")})
    assert {"_A", "_f", "_x", "_y", "_z", "_b"} <= own
