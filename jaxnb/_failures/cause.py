"""One error for a death in the group, cause first.

When a process dies, the others fail soon after, in their own words: a gloo
"Connection closed by peer", or JAX's coordination service aborting them
(SIGABRT). Whatever arrived first, the error names the death that started it
(which process, how, its last stderr lines), then what followed, as
consequences, then what to do. Pure: the caller describes the processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jaxnb._core.errors import ProcessFailure, traceback_text
from jaxnb._core.messages import GROUP_BROKEN, label, labels

#: Lines a process writes when it dies *because* another process died.
FOLLOWER_MARKS = (
    "JAX distributed service detected fatal errors",
    "another task died",
    "leader task was preempted/died",
)


def first_deaths(dead: dict[int, str], logs: dict[int, str]) -> tuple[list[int], list[int]]:
    """Split the dead processes into causes and followers (killed by the first deaths).

    A follower's log says that JAX's distributed service aborted it because
    another task died. If every death looks like a follower, all are causes.
    """
    followers = [p for p in sorted(dead) if any(m in logs.get(p, "") for m in FOLLOWER_MARKS)]
    causes = [p for p in sorted(dead) if p not in followers]
    return (causes, followers) if causes else (sorted(dead), [])


def death_failure(
    dead: dict[int, str],
    errors: dict[int, Any],
    logs: dict[int, str],
    describe: Callable[[dict[int, str]], str],
    one_line: Callable[[dict[int, str]], str],
    notes: Iterable[str] = (),
) -> ProcessFailure:
    """A :class:`ProcessFailure`: the first deaths, their followers, the survivors' errors.

    ``dead`` maps a process to how it ended; ``errors`` to what a process
    raised (errors of dead processes, e.g. ipyparallel's ``EngineError``, are
    left out: the death says more); ``logs`` to a dead process's last log
    lines. ``describe`` and ``one_line`` tell about some dead processes
    (several lines; one line). ``notes`` come last.
    """
    causes, followers = first_deaths(dead, logs)
    raised = {p: e for p, e in sorted(errors.items()) if p not in dead}
    parts = [describe({p: dead[p] for p in causes})]
    if followers:
        parts.append("Then, as a consequence: " + describe({p: dead[p] for p in followers}))
    if raised:
        parts.append(f"Then {labels(raised)} raised, as a consequence:\n" + tracebacks(raised))
    parts.extend(note for note in notes if note)
    summary = one_line({p: dead[p] for p in causes})
    after = [*followers, *raised]
    if after:
        summary += f"; then {labels(after)} failed as a consequence"
    return ProcessFailure(f"{summary}; {GROUP_BROKEN}", sorted(dead), parts)


def tracebacks(errors: dict[int, Any]) -> str:
    """``---- [pI] ----`` and the remote traceback of each error."""
    return "\n".join(
        f"---- {label(p)} ----\n{traceback_text(error).rstrip()}" for p, error in sorted(errors.items())
    )
