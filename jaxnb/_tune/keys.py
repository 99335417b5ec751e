"""Which sampled keys a notebook function never reads (a likely typo): found in its code, not run."""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any

#: How deep to follow the notebook functions a train function calls.
DEPTH = 3


def unread(fn: Any, keys: Iterable[str]) -> list[str]:
    """The ``keys`` that appear as no string constant in ``fn`` or the functions it calls.

    An empty list when ``fn`` is an engine-side name (its code is not here to look at).
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    strings = _strings(fn, DEPTH, set())
    return [k for k in keys if k not in strings]


def _strings(fn: Any, depth: int, seen: set[int]) -> set[str]:
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen:
        return set()
    seen.add(id(code))
    found: set[str] = set()
    names: set[str] = set()
    for c in _codes(code):
        found.update(v for v in c.co_consts if isinstance(v, str))
        names.update(c.co_names)
        found.update(c.co_varnames)  # keys passed as keywords: Model(**config)
    if depth > 0:
        glob = getattr(fn, "__globals__", {})
        for name in names:
            value = glob.get(name)
            if isinstance(value, types.FunctionType):
                found |= _strings(value, depth - 1, seen)
            elif isinstance(value, type):  # a class: its methods (e.g. a model reading config)
                for attr in vars(value).values():
                    if isinstance(attr, types.FunctionType):
                        found |= _strings(attr, depth - 1, seen)
    return found


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)
