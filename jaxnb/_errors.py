"""Exceptions users meet, each with a one-line message that says what to do."""

from __future__ import annotations


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


NOT_STARTED = (
    "no jaxnb cluster is running; start one with `%jax_cluster start` "
    "(or `jaxnb.JaxCluster().start()`)"
)
ALREADY_RUNNING = (
    "a jaxnb cluster is already running; use `%jax_cluster restart` to start it again "
    "or `%jax_cluster stop` first"
)
