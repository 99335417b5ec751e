"""The debugger's prompt in the notebook: pdb's commands for one process, several, or all.

Commands come from the kernel's input prompt (``input()``, which a Jupyter kernel turns into a
stdin request, as ``%debug`` does) or, for papermill and scripts, from ``-c``
(:func:`split_commands`). A command goes to one process (``p1: p x``), to every process the
session holds (``all: p x.shape``), or, without a prefix, to the session's default ones. Each
process answers as text (pdb runs on the engine: :mod:`jaxnb._engine.debug.console`); several
answers are merged as a cell's output is (:func:`jaxnb._core.merged_text.merge`).
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import sys
import threading
import tokenize
from collections.abc import Callable, Iterable, Iterator

from jaxnb._core.merged_text import merge
from jaxnb._core.messages import label, labels

#: ``p1: p x`` / ``all: p x.shape``: the processes a command is for.
TARGET = re.compile(r"^\s*(?:p(?P<process>\d+)|(?P<all>all))\s*:(?!=)\s*(?P<command>.*)$", re.S)
CONTINUE = frozenset({"c", "cont", "continue"})
QUIT = frozenset({"q", "quit", "exit"})
HELP = frozenset({"h", "help"})
#: The prompt; the processes commands go to by default follow it.
PROMPT = "(jaxnb {targets}) "

#: What ``h`` shows.
HELP_TEXT = (
    "jaxnb's debugger (pdb's commands, run on the processes):\n"
    "  p EXPR, pp EXPR   print a value (a JAX array: its shape, dtype and sharding, not its data)\n"
    "  l [FIRST[, LAST]], ll   the source around the current line, the whole function\n"
    "  up [N], down [N], w     move in the stack, show it\n"
    "  a, whatis EXPR, EXPR, !STATEMENT   arguments, a type, any Python\n"
    "  p1: COMMAND, all: COMMAND   to process 1, to every process here\n"
    "  c   continue (at jaxnb.breakpoint(): every process)   q   quit"
)

#: Ask processes: (processes, command) -> their answers (text) by process.
Ask = Callable[[list[int], str], dict[int, str]]


class SessionOver(Exception):
    """A process the session holds is gone: the session ends (the message says why)."""


def error_answer(exc: BaseException) -> str:
    """A process's error (a local one, or ipyparallel's RemoteError) as pdb shows one: one line."""
    name = getattr(exc, "ename", type(exc).__name__)
    return f"*** {name}: {getattr(exc, 'evalue', exc)}\n"


def split_commands(text: str) -> list[str]:
    """``p x; up; p y`` as three commands: split at ``;`` (pdb's ``;;`` too) and line ends,
    never inside a string or brackets."""
    cuts: list[int] = []
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth = max(depth - 1, 0)
            elif token.type in (tokenize.NEWLINE, tokenize.NL) or (
                    token.type == tokenize.OP and token.string == ";" and depth == 0):
                cuts.append(starts[token.start[0] - 1] + token.start[1])
    except (tokenize.TokenError, IndentationError, SyntaxError):  # not Python: plain cuts
        return [c.strip() for c in re.split(r"[;\n]", text) if c.strip()]
    pieces, begin = [], 0
    for cut in cuts:
        pieces.append(text[begin:cut])
        begin = cut + 1
    pieces.append(text[begin:])
    return [p.strip() for p in pieces if p.strip()]


def stdin_available() -> bool:
    """Whether ``input()`` here reaches a person: the notebook front end (a kernel's execute
    request that allows stdin; papermill's does not) or a terminal."""
    if threading.current_thread() is not threading.main_thread():
        return False  # a background run's thread: no cell waits on it
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    kernel = getattr(get_ipython(), "kernel", None) if get_ipython is not None else None
    if kernel is not None:
        parent = kernel.get_parent("shell") or {}
        return bool(parent.get("content", {}).get("allow_stdin"))
    return sys.stdin is not None and sys.stdin.isatty()


class Console:
    """One debugging session: the processes it holds, where commands go, and the prompt loop."""

    def __init__(self, ask: Ask, processes: list[int], default: list[int]) -> None:
        self.ask = ask
        self.processes = list(processes)
        self.default = list(default)

    def run(self, commands: Iterable[str], interactive: bool) -> str:
        """Run ``commands`` (each shown after the prompt, as typed), then, if ``interactive``,
        read more at the prompt; ``"c"`` or ``"q"`` when one ended the session, ``""`` when
        the commands ran out or no prompt could be shown."""
        try:
            for line in commands:
                print(f"{self.prompt()}{line}")
                ended = self.one(line)
                if ended:
                    return ended
            while interactive:
                try:
                    with _interruptible():
                        line = input(self.prompt())
                except (EOFError, NotImplementedError, OSError):  # StdinNotImplementedError too
                    return ""
                ended = self.one(line)
                if ended:
                    return ended
        except SessionOver as over:
            print(f"jaxnb: {over}")
            return "c"
        return ""

    def prompt(self) -> str:
        return PROMPT.format(targets=",".join(f"p{p}" for p in self.default))

    def one(self, line: str) -> str:
        """Carry out one command line; ``"c"``/``"q"`` when it ends the session."""
        targets, command = self.default, line.strip()
        match = TARGET.match(line)
        if match:
            command = match["command"].strip()
            targets = self.processes if match["all"] else [int(match["process"])]
        word = command.split(maxsplit=1)[0] if command else ""
        if word in CONTINUE or word in QUIT:
            return "c" if word in CONTINUE else "q"
        if word in HELP:
            print(HELP_TEXT)
            return ""
        if not command:
            return ""
        strangers = [p for p in targets if p not in self.processes]
        if strangers:
            print(f"jaxnb: {label(strangers[0])} is not in this session; it holds "
                  f"{labels(self.processes)} (e.g. {label(self.processes[0])[1:-1]}: p x)")
            return ""
        answers = self.ask(targets, command)
        sys.stdout.write(merge(answers) if len(answers) > 1 else "".join(answers.values()))
        return ""


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """An interrupt (the Stop button) raises ``KeyboardInterrupt`` at the prompt, also while a
    training run counts interrupts instead (:class:`jaxnb._train.interrupts.InterruptCounter`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
