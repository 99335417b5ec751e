"""Exceptions users meet, each with a one-line message that says what to do."""

from __future__ import annotations

import re
from typing import Any

from jaxnb._core.messages import labels

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_NUMBER = re.compile(r"Cell In\[\d+\]")


class JaxnbError(Exception):
    """Base class of jaxnb's own errors."""


class ClusterStateError(JaxnbError):
    """The cluster is not in a state that allows this call (not started, already running)."""


class StartError(JaxnbError):
    """The cluster could not start; everything it had started was stopped."""


class RemoteError(JaxnbError):
    """An exception raised on one or more JAX processes.

    ``processes`` lists the process indices that raised; the message shows
    each distinct remote traceback once. IPython renders it without the
    local (jaxnb-internal) traceback.
    """

    def __init__(self, summary: str, processes: list[int], tracebacks: list[str]):
        super().__init__(summary)
        self.summary = summary
        self.processes = processes
        self.tracebacks = tracebacks

    def _render_traceback_(self) -> list[str]:
        lines: list[str] = []
        for tb in self.tracebacks:
            lines.extend(tb.rstrip("\n").splitlines())
            lines.append("")
        lines.append(f"{type(self).__name__}: {self.summary}")
        return lines

    def __str__(self) -> str:
        return self.summary + ("\n\n" + "\n".join(self.tracebacks) if self.tracebacks else "")


class ProcessFailure(RemoteError):
    """A process died, the processes diverged, or a cell timed out."""


def remote_error(errors: dict[int, Any]) -> RemoteError:
    """One exception for the processes that raised (JAX index → ipyparallel's error), each
    distinct traceback shown once under the labels of the processes that raised it."""
    groups: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    for p, e in sorted(errors.items()):
        text = traceback_text(e)
        key = _CELL_NUMBER.sub("Cell", text)
        groups.setdefault(key, []).append(p)
        texts.setdefault(key, text)
    tracebacks = [f"---- {labels(procs)} ----\n{texts[key]}" for key, procs in groups.items()]
    first = errors[min(errors)]
    name = getattr(first, "ename", type(first).__name__)
    value = getattr(first, "evalue", str(first))
    count = "process" if len(errors) == 1 else "processes"
    return RemoteError(f"{name}: {value} (on {count} {labels(errors)})", sorted(errors), tracebacks)


def traceback_text(error: Any) -> str:
    """The remote traceback of an ipyparallel error (or a local exception's one line), no colours."""
    tb = getattr(error, "traceback", None)
    if isinstance(tb, list):
        tb = "\n".join(tb)
    if not tb:
        tb = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
    return _ANSI.sub("", tb)

