"""pdb on this process's frames, one command at a time, each answer given back as text.

:class:`Console` is Python's own ``pdb.Pdb`` on the user's frames (:mod:`.frames`): ``p``,
``pp``, ``l``, ``ll``, ``up``, ``down``, ``w``, ``a``, ``whatis`` and any expression or
``!statement``, evaluated in the current frame. It looks and never steps: pdb's stepping and
breakpoint commands answer one line that says so. A JAX array prints as its shape, dtype and
sharding (:func:`jaxnb._engine.layout.value.array_text`): its data stays on the devices, and
no command waits on another process unless it computes on a global array.
"""

from __future__ import annotations

import contextlib
import io
import pdb
import pprint
import types
from typing import Any

import jax

from jaxnb._engine.debug import frames
from jaxnb._engine.layout.value import array_text

#: pdb's commands that look at frames and values (every other line is Python code).
LOOKING = frozenset({"p", "pp", "l", "list", "ll", "longlist", "u", "up", "d", "down", "w",
                     "where", "bt", "a", "args", "whatis", "source", "retval", "rv"})
#: What the user may type, for messages.
COMMANDS = "p, pp, l, ll, up, down, w, a, whatis, or any expression"
NOT_HERE = ("*** {name}: jaxnb's debugger shows frames and values but does not step or set "
            "breakpoints; use " + COMMANDS + " (c continues)")


class Console(pdb.Pdb):
    """pdb on ``entries`` (outermost first; the innermost is current); :meth:`answer` one command."""

    def __init__(self, entries: list[frames.Entry], tb: types.TracebackType | None = None) -> None:
        self.out = io.StringIO()
        super().__init__(stdin=io.StringIO(), stdout=self.out, nosigint=True, readrc=False)
        self.reset()  # bdb's state (no tracing is ever started)
        self.setup(None if tb is not None else entries[-1][0], tb)
        self.stack = list(entries)  # pdb's stack, without jaxnb's, ipyparallel's and IPython's frames
        self.curindex = len(entries) - 1
        self.curframe = entries[-1][0]
        self.curframe_locals = self.curframe.f_locals

    def answer(self, line: str) -> str:
        """Run one pdb command or Python line in the current frame; everything it printed."""
        self.out.seek(0)
        self.out.truncate()
        name = line.split(maxsplit=1)[0] if line.strip() else ""
        if not name:
            return ""
        if hasattr(self, f"do_{name}") and name not in LOOKING:
            self.message(NOT_HERE.format(name=name))
        else:
            with contextlib.redirect_stdout(self.out), contextlib.redirect_stderr(self.out):
                self.onecmd(line)
        return self.out.getvalue()

    def here(self) -> str:
        """Where the current frame is, and its line (what pdb prints on entering)."""
        self.out.seek(0)
        self.out.truncate()
        self.print_stack_entry(self.stack[self.curindex])
        return self.out.getvalue()

    # ---- pdb's output, as the notebook shows it ---------------------------------------

    def print_stack_entry(self, frame_lineno: Any, prompt_prefix: str = "") -> None:
        frame, line = frame_lineno
        mark = "> " if frame is self.curframe else "  "
        self.message(f"{mark}{frames.location(frame, line)}")
        text = frames.source(frame, line)
        if text:
            self.message(f"-> {text}")

    def displayhook(self, obj: Any) -> None:
        if obj is not None:
            self.message(shown(obj))

    def do_p(self, arg: str) -> None:
        """p expression: print the value of the expression (a JAX array: shape, dtype, sharding)."""
        self._show(arg, pretty=False)

    def do_pp(self, arg: str) -> None:
        """pp expression: pretty-print the value of the expression."""
        self._show(arg, pretty=True)

    def _show(self, arg: str, pretty: bool) -> None:
        try:
            value = self._getval(arg)  # prints the error itself
        except Exception:
            return
        self.message(shown(value, pretty))


class _Described:
    """Stands for a JAX array in a printed container: its repr is the array's description."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def shown(value: Any, pretty: bool = False) -> str:
    """``repr`` (or ``pprint``) of ``value`` with every JAX array in it described, not printed."""
    if isinstance(value, jax.Array):
        return array_text(value)
    leaves = jax.tree_util.tree_leaves(value) if isinstance(value, dict | list | tuple) else []
    if any(isinstance(leaf, jax.Array) for leaf in leaves):
        try:
            value = jax.tree_util.tree_map(
                lambda x: _Described(array_text(x)) if isinstance(x, jax.Array) else x, value)
        except Exception:  # a container JAX cannot rebuild: list its arrays instead
            paths = jax.tree_util.tree_flatten_with_path(value)[0]
            return "\n".join(f"{jax.tree_util.keystr(p)}: {shown(x)}" for p, x in paths)
    return pprint.pformat(value) if pretty else repr(value)
