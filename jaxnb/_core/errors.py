"""Exceptions users meet, each with a one-line message that says what to do."""

from __future__ import annotations

import re
from typing import Any

from jaxnb._core.messages import labels
from jaxnb._core.tracebacks import fold

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_NUMBER = re.compile(r"Cell In\[\d+\]")


class JaxnbError(Exception):
    """Base class of jaxnb's own errors: ``except jaxnb.JaxnbError`` catches every one of them.

    Each message says in its first line what happened and what to do.
    """


class ClusterStateError(JaxnbError):
    """The cluster is not in a state that allows this call (not started, already running).

    Raised by :class:`jaxnb.JaxCluster`'s methods, e.g. ``run`` before ``start``, or a cell
    while a ``--background`` run holds the engines.
    """


class StartError(JaxnbError):
    """The cluster could not start; everything it had started was stopped.

    Raised by ``start`` and ``restart`` (``%jax_cluster start``): an engine that did not join
    ``jax.distributed`` within ``--init-timeout``, a host that failed the preflight, a job the
    queue did not start.
    """


class RemoteError(JaxnbError):
    """An exception raised on one or more JAX processes.

    ``processes`` lists the process indices that raised; the message shows
    each distinct remote traceback once, with the user's frames only (JAX's, jaxnb's,
    ipyparallel's and ``threading``'s left out); ``full_traceback`` has every
    frame. IPython renders it without the local (jaxnb-internal) traceback,
    the one-line cause first.
    """

    def __init__(
        self, summary: str, processes: list[int], tracebacks: list[str], full_traceback: str = ""
    ):
        super().__init__(summary)
        self.summary = summary
        self.processes = processes
        self.tracebacks = tracebacks
        #: Every remote frame, jaxnb's and ipyparallel's included.
        self.full_traceback = full_traceback or "\n".join(tracebacks)

    def _render_traceback_(self) -> list[str]:
        lines: list[str] = [f"{type(self).__name__}: {self.summary}", ""]
        for tb in self.tracebacks:
            lines.extend(tb.rstrip("\n").splitlines())
            lines.append("")
        lines.append(f"{type(self).__name__}: {self.summary}")  # and last, where eyes land
        return lines

    def __str__(self) -> str:
        return self.summary + ("\n\n" + "\n".join(self.tracebacks) if self.tracebacks else "")


class ProcessFailure(RemoteError):
    """A process died, the processes diverged, or a cell timed out.

    Raised by a cell or a training run within seconds of the failure, naming each process,
    how it ended, and where the others wait. ``%jax_cluster restart`` brings the cluster back.
    """

    #: True when the processes passed arrays of different sizes to one collective; what they
    #: computed after it (and printed) is not valid.
    mismatch: bool = False


def remote_error(errors: dict[int, Any], cause: str = "") -> RemoteError:
    """One exception for the processes that raised (JAX index → ipyparallel's error), each
    distinct traceback shown once under the labels of the processes that raised it; led by
    ``cause`` when jaxnb knows why (then the error follows it)."""
    groups: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    for p, e in sorted(errors.items()):
        text = traceback_text(e)
        key = _CELL_NUMBER.sub("Cell", text)
        groups.setdefault(key, []).append(p)
        texts.setdefault(key, text)
    tracebacks, full = [], []
    for key, procs in groups.items():
        shown, every = sections(procs, texts[key])
        tracebacks.append(shown)
        full.append(every)
    first = errors[min(errors)]
    name = getattr(first, "ename", type(first).__name__)
    value = getattr(first, "evalue", str(first))
    count = "process" if len(errors) == 1 else "processes"
    summary = f"{name}: {value} (on {count} {labels(errors)})"
    if cause:
        summary = f"{cause}; {summary}"
    return RemoteError(summary, sorted(errors), tracebacks, "\n".join(full))


def sections(processes: list[int], text: str) -> tuple[str, str]:
    """``---- [p0], [p1] ----`` and a remote traceback: as shown (the user's frames, a note on
    the others) and whole (for ``full_traceback``)."""
    head = f"---- {labels(processes)} ----\n"
    folded = fold(text)
    note = f"\n{folded.note()}" if folded.count else ""
    return f"{head}{folded.text.rstrip()}{note}", f"{head}{text}"


#: Errors an engine raises whose message is already the user's one line (a name not defined
#: there, a value of the wrong kind): raised in the notebook as the same exception.
AS_RAISED = {"NameError": NameError, "TypeError": TypeError}


def as_local(error: Any) -> BaseException | None:
    """An engine's ``NameError`` or ``TypeError`` (ipyparallel's RemoteError) as the same
    exception here, with its message; ``None`` for any other error."""
    kind = AS_RAISED.get(getattr(error, "ename", "") or "")
    return kind(getattr(error, "evalue", "")) if kind is not None else None


def traceback_text(error: Any) -> str:
    """The remote traceback of an ipyparallel error (or a local exception's one line), no colours."""
    tb = getattr(error, "traceback", None)
    if isinstance(tb, list):
        tb = "\n".join(tb)
    if not tb:
        tb = f"{getattr(error, 'ename', type(error).__name__)}: {getattr(error, 'evalue', error)}"
    return _ANSI.sub("", tb)



INTERRUPTED = "KeyboardInterrupt: jaxnb interrupted the cell on every process (what each was doing: above)"


def short_interrupt(exc: BaseException) -> BaseException:
    """``exc`` (a kernel interrupt in a jaxnb call) shown by IPython as one line, not jaxnb's frames."""
    exc._render_traceback_ = lambda: [INTERRUPTED]  # type: ignore[attr-defined]
    return exc
