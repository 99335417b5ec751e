"""The user's frames of a failure or of a live stop, named as the notebook's tracebacks name them.

A frame in a cell reads ``Cell In[4], line 3, in train`` (IPython's map of cell files, which
:mod:`jaxnb._engine.run.cell_sources` also fills for functions sent from the notebook); any
other frame ``File /path/to/module.py:12, in f``. Frames of jaxnb, ipyparallel and IPython
are left out by the rule the tracebacks follow (:func:`jaxnb._core.tracebacks.is_hidden`).
"""

from __future__ import annotations

import linecache
import traceback
import types

from jaxnb._core.tracebacks import is_entry, is_hidden
from jaxnb._engine.run.cell_sources import cell_number

#: One frame and the line it is at (pdb's stack entries).
Entry = tuple[types.FrameType, int]


def of_traceback(tb: types.TracebackType | None) -> list[Entry]:
    """The user's frames of a traceback, outermost first (all of them if none is the user's)."""
    entries = [(frame, line) for frame, line in traceback.walk_tb(tb)]
    return [e for e in entries if not hidden(*e)] or entries


def of_frame(frame: types.FrameType) -> list[Entry]:
    """The user's frames from the cell (or the train function) down to ``frame``, outermost first."""
    chain: list[Entry] = []
    at: types.FrameType | None = frame
    while at is not None and not is_entry(at.f_code.co_filename, at.f_code.co_name):
        chain.append((at, at.f_lineno))
        at = at.f_back
    chain.reverse()
    return [e for e in chain if not hidden(*e)] or chain


def location(frame: types.FrameType, line: int) -> str:
    """``Cell In[4], line 3, in train`` or ``File /path/x.py:12, in f``."""
    code = frame.f_code
    number = cell_number(code.co_filename)
    where = f"Cell In[{number}], line {line}" if number is not None else f"File {code.co_filename}:{line}"
    return where if code.co_name == "<module>" else f"{where}, in {code.co_name}"


def source(frame: types.FrameType, line: int) -> str:
    """The text of ``line`` in ``frame``'s file (a cell's too), stripped; "" if unknown."""
    return linecache.getline(frame.f_code.co_filename, line, frame.f_globals).strip()


def hidden(frame: types.FrameType, line: int) -> bool:
    """A frame of jaxnb, ipyparallel or IPython (never shown, as in tracebacks)."""
    code = frame.f_code
    return is_hidden(f"File {code.co_filename}:{line}, in {code.co_name}")
