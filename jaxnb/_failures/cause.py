"""One error for a death in the group, cause first.

When a process dies, the others fail soon after, in their own words: a gloo
"Connection closed by peer", or JAX's coordination service aborting them
(SIGABRT). Whatever arrived first, the error names the death that started it
(which process, how, its last stderr lines), then what followed, as
consequences, then what to do. A death whose log says why it happened leads with
that cause: a collective whose sizes differ across processes (gloo's check aborts
the process that receives too much). Pure: the caller describes the processes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from jaxnb._core.errors import ProcessFailure, sections, traceback_text
from jaxnb._core.messages import GROUP_BROKEN, label, labels

#: Lines a process writes when it dies *because* another process died.
FOLLOWER_MARKS = (
    "JAX distributed service detected fatal errors",
    "another task died",
    "leader task was preempted/died",
)


#: What gloo writes before it aborts a process that received more bytes than the collective
#: expected (the processes passed arrays of different sizes to it); the sizes when given.
_SIZE_MISMATCH = re.compile(
    r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)|Received data size doesn't match expected size")
SIZE_MISMATCH = "collective size mismatch"
NOT_VALID = (
    "jaxnb: the output below comes from a cell whose collectives did not match in size: "
    "what was computed after the mismatch is not valid"
)


def size_mismatch(log: str) -> str | None:
    """What a process's log says of a collective size mismatch: ``"gloo's sizes 18 vs 4"``
    (what arrived against what it expected, in gloo's units) or ``""`` when gloo gave none;
    ``None`` when the log says nothing of one."""
    found = list(_SIZE_MISMATCH.finditer(log))
    if not found:
        return None
    sized = [m for m in found if m[1]]
    return f"gloo's sizes {sized[-1][1]} vs {sized[-1][2]}" if sized else ""


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
    left out: the death says more); ``logs`` to what a dead process wrote during
    the cell. ``describe`` and ``one_line`` tell about some dead processes
    (several lines; one line). ``notes`` come last.
    """
    causes, followers = first_deaths(dead, logs)
    raised = {p: e for p, e in sorted(errors.items()) if p not in dead}
    parts = [describe({p: dead[p] for p in causes})]
    full = list(parts)
    if followers:
        parts.append("Then, as a consequence: " + describe({p: dead[p] for p in followers}))
        full.append(parts[-1])
    if raised:
        shown, every = tracebacks(raised)
        parts.append(f"Then {labels(raised)} raised, as a consequence:\n" + shown)
        full.append(f"Then {labels(raised)} raised, as a consequence:\n" + every)
    parts.extend(note for note in notes if note)
    full.extend(parts[len(full):])
    summary = one_line({p: dead[p] for p in causes})
    after = [*followers, *raised]
    if after:
        summary += f"; then {labels(after)} failed as a consequence"
    mismatch = {p: said for p in causes if (said := size_mismatch(logs.get(p, ""))) is not None}
    if mismatch:
        sizes = "; ".join(f"{label(p)} got more than it expected, {said}"
                          for p, said in sorted(mismatch.items()) if said)
        summary = (f"{SIZE_MISMATCH}: the processes passed arrays of different sizes to one "
                   f"collective{f' ({sizes})' if sizes else ''}, so gloo aborted "
                   f"{labels(mismatch)}; {summary}")
    failure = ProcessFailure(f"{summary}; {GROUP_BROKEN}", sorted(dead), parts, "\n".join(full))
    failure.mismatch = bool(mismatch)
    return failure


def tracebacks(errors: dict[int, Any]) -> tuple[str, str]:
    """``---- [pI] ----`` and the remote traceback of each error: as shown, and whole."""
    both = [sections([p], traceback_text(error)) for p, error in sorted(errors.items())]
    return "\n".join(shown for shown, _ in both), "\n".join(full for _, full in both)
