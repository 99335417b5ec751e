"""Which variable holds each array: ``params['w1']``, ``state.opt[0].mu`` (engine side).

:func:`find_holders` walks namespaces (the engine's user namespace, the locals of the frames an
error went through) and every pytree in them, and names each array it meets by the variable and
the pytree path that lead to it. ``%jax_cluster memory``, an out-of-memory explanation and
``%jax_who`` use it.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

#: Names of an IPython namespace that are not the user's variables.
NOT_VARIABLES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
#: The standard library's folder: its frames are not the user's.
STDLIB = os.path.dirname(os.__file__)
#: At most this many leaves are looked at per variable (a huge list is not walked whole).
MAX_LEAVES = 100_000


def user_variables(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The user's variables in ``namespace``: not private (``_x``), not modules, functions,
    classes or IPython's own names."""
    skip = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)
    return {name: value for name, value in list(namespace.items())
            if not name.startswith("_") and name not in NOT_VARIABLES and not isinstance(value, skip)}


def find_holders(ids: Iterable[int], namespaces: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[int, str]:
    """``id(array)`` → the first name that leads to it, for the arrays in ``ids``.

    ``namespaces`` are ``(suffix, namespace)`` pairs, searched in order: the suffix follows
    each name found there (``" (in train)"`` for a function's locals, ``""`` for the
    notebook's globals). A name is a variable and its pytree path: ``params['w1']``.
    """
    wanted = set(ids)
    found: dict[int, str] = {}
    jax = sys.modules.get("jax")
    if jax is None or not wanted:
        return found
    for suffix, namespace in namespaces:
        for name, value in user_variables(namespace).items():
            for path, leaf in _leaves(jax, value):
                key = id(leaf)
                if key in wanted and key not in found:
                    found[key] = f"{name}{path}{suffix}"
            if len(found) == len(wanted):
                return found
    return found


def _leaves(jax: Any, value: Any) -> list[tuple[str, Any]]:
    """``(pytree path, leaf)`` of every array leaf of ``value`` (``""`` for ``value`` itself)."""
    if isinstance(value, jax.Array):
        return [("", value)]
    try:
        flat, _ = jax.tree_util.tree_flatten_with_path(value)
    except Exception:  # an object JAX cannot flatten: not a pytree of arrays
        return []
    if len(flat) == 1 and flat[0][1] is value:
        return []  # a leaf that is not an array
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat[:MAX_LEAVES]
            if isinstance(leaf, jax.Array)]


def frame_namespaces(tb: types.TracebackType | None, skip: Mapping[str, Any] | None = None
                     ) -> list[tuple[str, Mapping[str, Any]]]:
    """The locals of every user frame a traceback went through, innermost first, each with the
    suffix ``" (in NAME)"``; frames of JAX, jaxnb and the standard library are left out, and so
    is a frame whose locals are ``skip`` (a cell's frame: its locals are the notebook's
    globals)."""
    frames: list[tuple[str, Mapping[str, Any]]] = []
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_locals is not skip and _users(frame.f_code.co_filename):
            frames.append((f" (in {frame.f_code.co_name})", frame.f_locals))
        tb = tb.tb_next
    return frames[::-1]


def _users(filename: str) -> bool:
    """Whether code in ``filename`` is the user's (a cell, a notebook function, their module)."""
    marks = ("/jax/", "/jaxlib/", "/jaxnb/", "/ipyparallel/", "/IPython/", "/ipykernel/",
             "/site-packages/flax/", "/site-packages/optax/")
    return not any(m in filename for m in marks) and not filename.startswith(STDLIB + os.sep)
