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

from jaxnb._core.sent_functions import code_key, functions_reached

#: How many functions (the one sent and those it reaches) are looked at, at most.
MAX_FUNCTIONS = 200


def cell_sources(fn: Any, shell: Any = None) -> dict[str, Any]:
    """``{"codes": {key: file}, "files": {file: [lines, In number]}}`` for notebook code in ``fn``."""
    numbers = _cell_numbers(shell)
    codes: dict[str, str] = {}
    files: dict[str, list[Any]] = {}
    for f in functions_reached(fn, MAX_FUNCTIONS):
        for c in _codes(f.__code__):
            lines = linecache.getlines(c.co_filename)
            if not lines or c.co_filename not in numbers:
                continue
            codes[code_key(c)] = c.co_filename
            files.setdefault(c.co_filename, [lines, numbers[c.co_filename]])
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
