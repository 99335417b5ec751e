"""The notebook cells that a function sent to the engines was defined in.

cloudpickle names the file of every function it sends by value
``<dynamic-code>``, so an engine's traceback cannot show the source of a
function defined in the notebook. :func:`cell_sources` gives, for the
function and the notebook functions it calls, where each was defined (the
cell's file name, its source and its ``In[N]`` number); the engine puts it
back (:mod:`jaxnb._engine.run.cell_sources`) before the function runs.
"""

from __future__ import annotations

import linecache
import types
from typing import Any

#: How many functions (the one sent and those it reaches) are looked at, at most.
MAX_FUNCTIONS = 200


def code_key(code: types.CodeType) -> str:
    """What identifies a code object on both sides: its qualified name and first line."""
    return f"{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}"


def cell_sources(fn: Any, shell: Any = None) -> dict[str, Any]:
    """``{"codes": {key: file}, "files": {file: [lines, In number]}}`` for notebook code in ``fn``."""
    numbers = _cell_numbers(shell)
    codes: dict[str, str] = {}
    files: dict[str, list[Any]] = {}
    seen: set[int] = set()
    todo = [fn]
    while todo and len(seen) < MAX_FUNCTIONS:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType) or id(f) in seen:
            continue
        seen.add(id(f))
        for c in _codes(code):
            lines = linecache.getlines(c.co_filename)
            if not lines or c.co_filename not in numbers:
                continue
            codes[code_key(c)] = c.co_filename
            files.setdefault(c.co_filename, [lines, numbers[c.co_filename]])
        g = getattr(f, "__globals__", {})
        todo.extend(v for name in code.co_names if isinstance(v := g.get(name), types.FunctionType))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                if isinstance(cell.cell_contents, types.FunctionType):
                    todo.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
    return {"codes": codes, "files": files}


def _codes(code: types.CodeType) -> list[types.CodeType]:
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_codes(const))
    return found


def _cell_numbers(shell: Any) -> dict[str, int]:
    """The notebook's cell files and their ``In[N]`` numbers (IPython's own map)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return {}
        shell = get_ipython()
    return dict(getattr(getattr(shell, "compile", None), "_filename_map", None) or {})
