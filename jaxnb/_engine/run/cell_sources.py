"""Give functions sent from the notebook their cells back, so tracebacks show their source.

The notebook sends :func:`jaxnb._train.sources.cell_sources` with the
function; :func:`restore` names each code object's file as the notebook's
cell file again, puts the cell's lines in :mod:`linecache` and tells
IPython the cell's ``In[N]``, so a traceback reads ``Cell In[4], line 3, in
train(config)`` with the line, as in the notebook.
"""

from __future__ import annotations

import contextlib
import linecache
import types
from typing import Any

_DYNAMIC = "<dynamic-code>"


def code_key(code: types.CodeType) -> str:
    """As :func:`jaxnb._train.sources.code_key` (the notebook side): qualified name, first line."""
    return f"{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}"


def restore(fn: Any, sources: dict[str, Any] | None) -> None:
    """Rename the files of ``fn``'s code (and the notebook functions it reaches) to their cells."""
    if not sources or not sources.get("codes"):
        return
    files = sources.get("files", {})
    for filename, (lines, number) in files.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)
        _tell_ipython(filename, number)
    codes = sources["codes"]
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType) or id(f) in seen:
            continue
        seen.add(id(f))
        g = getattr(f, "__globals__", {})
        todo.extend(v for name in code.co_names if isinstance(v := g.get(name), types.FunctionType))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                if isinstance(cell.cell_contents, types.FunctionType):
                    todo.append(cell.cell_contents)
            except ValueError:
                pass
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            f.__code__ = _renamed(code, codes)


def _renamed(code: types.CodeType, codes: dict[str, str]) -> types.CodeType:
    consts = tuple(_renamed(c, codes) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    filename = codes.get(code_key(code)) if code.co_filename == _DYNAMIC else None
    return code.replace(co_filename=filename or code.co_filename, co_consts=consts)


def _tell_ipython(filename: str, number: int) -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    mapping = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if isinstance(mapping, dict):
        mapping[filename] = number
