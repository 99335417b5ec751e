"""jaxnb's own source files, each parsed once per test process (the structure, message and
private-name checks all walk every module)."""

from __future__ import annotations

import ast
import functools
import pathlib


@functools.cache
def parsed(path: pathlib.Path) -> ast.Module:
    """The syntax tree of ``path`` (shared: never change it)."""
    return ast.parse(path.read_text(), str(path))
