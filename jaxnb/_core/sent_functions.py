"""A function the notebook sends to the engines, as both sides see it.

cloudpickle sends a notebook function by value, with the notebook functions it calls;
each side walks the same functions (:func:`functions_reached`) and names each code
object the same way (:func:`code_key`). The notebook (``jaxnb._train.sources``) records
which cell each code object came from; an engine (``jaxnb._engine.run.cell_sources``)
gives the code its cell back. Pure Python: both sides import it.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any


def code_key(code: types.CodeType) -> str:
    """What identifies a code object on both sides: its qualified name and first line."""
    return f"{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}"


def functions_reached(fn: Any, limit: int | None = None) -> Iterator[Any]:
    """``fn`` and the Python functions it reaches through its globals and closure, each once
    (at most ``limit``); each is yielded before the functions it reaches are looked up."""
    seen: set[int] = set()
    todo = [fn]
    while todo and (limit is None or len(seen) < limit):
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if not isinstance(code, types.CodeType) or id(f) in seen:
            continue
        seen.add(id(f))
        yield f
        g = getattr(f, "__globals__", {})
        todo.extend(v for name in code.co_names if isinstance(v := g.get(name), types.FunctionType))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                if isinstance(cell.cell_contents, types.FunctionType):
                    todo.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
