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

from jaxnb._core.sent_functions import code_key, functions_reached

_DYNAMIC = "<dynamic-code>"


def restore(fn: Any, sources: dict[str, Any] | None) -> None:
    """Rename the files of ``fn``'s code (and the notebook functions it reaches) to their cells."""
    if not sources or not sources.get("codes"):
        return
    files = sources.get("files", {})
    for filename, (lines, number) in files.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)
        _tell_ipython(filename, number)
    codes = sources["codes"]
    for f in functions_reached(fn):
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            f.__code__ = _renamed(f.__code__, codes)


def _renamed(code: types.CodeType, codes: dict[str, str]) -> types.CodeType:
    consts = tuple(_renamed(c, codes) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    filename = codes.get(code_key(code)) if code.co_filename == _DYNAMIC else None
    return code.replace(co_filename=filename or code.co_filename, co_consts=consts)


def cell_number(filename: str) -> int | None:
    """The ``In[N]`` of the cell whose code is in ``filename`` (as tracebacks name it), or None."""
    number = _filename_map().get(filename)
    return number if isinstance(number, int) else None


def _tell_ipython(filename: str, number: int) -> None:
    _filename_map()[filename] = number  # outside IPython: a throwaway dict


def _filename_map() -> dict[str, Any]:
    """IPython's map of cell files to their ``In[N]`` (empty outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    mapping = getattr(getattr(get_ipython(), "compile", None), "_filename_map", None)
    return mapping if isinstance(mapping, dict) else {}
