"""``%jax_debug``: a post-mortem of the last failure, on a process that failed, at its frame.

Every process keeps the frames of its last failed cell or training run until the next cell
runs on it (:mod:`jaxnb._engine.debug.kept`). :func:`debug` asks every process whether it
holds one, opens the session on the process that failed first (``process=``/``--process``
picks another) and sends it pdb's commands, typed at the prompt or given as ``commands``
(``-c``), as ordinary ipyparallel ``apply`` requests. ``commands`` given while no process
holds a failure answer the next ``jaxnb.breakpoint()`` instead (:mod:`.stops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.messages import label, labels, plural
from jaxnb._core.spelling import example, option
from jaxnb._core.state import Group
from jaxnb._debug.prompt import Console, error_answer, split_commands, stdin_available

_SUMMARY = EngineCall("jaxnb._engine.debug.kept:summary")
_HERE = EngineCall("jaxnb._engine.debug.kept:here")
_COMMAND = EngineCall("jaxnb._engine.debug.kept:command")
_READY = EngineCall("jaxnb._engine.debug.hooks:ready")
#: How long the processes may take to say whether they hold a failure (seconds).
ASK_SECONDS = 30.0
#: How long a command's answer may take before the session says so and ends.
ANSWER_SECONDS = 120.0

NOTHING_LEFT = (
    "nothing is left to debug: a cell ran on {which} after the failure (frames are kept only "
    "until the next cell); run the failing cell again, then %jax_debug"
)
NOTHING = (
    "nothing to debug: no process holds a failed cell or training run; %jax_debug opens the "
    "frames of one that raised (for jaxnb.breakpoint(), give commands with {commands} first)"
)
HEADLESS = ("no input prompt here (the notebook runs headless); give the commands with {commands}, "
            "e.g. {example}")
NO_BREAKPOINTS = ("jaxnb.breakpoint() cannot stop {who}: their ipykernel cannot take commands "
                  "while a cell runs (%jax_cluster status says why); debug after a failure with "
                  "%jax_debug instead")
FOR_BREAKPOINTS = ("jaxnb: no process holds a failure; {these} will answer the "
                   "jaxnb.breakpoint() stops of the next cell or training run that reaches one")


def debug(group: Group, process: int | None = None, commands: str | Sequence[str] | None = None) -> None:
    """Open a post-mortem session on a failed process (see the module's docstring)."""
    given = _commands(commands)
    if process is not None and process not in group.indices:
        raise ValueError(f"{example('process', process)} does not exist; choose "
                         f"0..{group.size - 1}")
    summaries = _summaries(group)
    failed = {p: s for p, s in summaries.items() if s["failed"]}
    if not failed:
        if given is not None and process is None:
            ready = dict(zip(group.indices, group.view.apply_async(_READY).get(timeout=ASK_SECONDS),
                             strict=True))
            if not all(ready.values()):
                raise ClusterStateError(NO_BREAKPOINTS.format(
                    who=labels(p for p, ok in ready.items() if not ok)))
            group.breakpoint_commands = given
            print(FOR_BREAKPOINTS.format(these=f"the {plural(len(given), 'command')}"))
            return
        dropped = [p for p, s in summaries.items() if s.get("dropped")]
        raise ClusterStateError(NOTHING_LEFT.format(which=labels(dropped)) if dropped
                                else NOTHING.format(commands=option("commands")))
    chosen = _choose(failed, process)
    if given is None and not stdin_available():
        raise ValueError(HEADLESS.format(commands=option("commands"), example=_example()))
    others = [p for p in failed if p != chosen]
    also = f" (also failed: {labels(others)}; p{others[0]}: COMMAND asks it)" if others else ""
    print(f"jaxnb: post-mortem of {label(chosen)}: {failed[chosen]['error']}{also}")
    print(group.engine(chosen).apply_sync(_HERE), end="")

    def ask(processes: list[int], line: str) -> dict[int, str]:
        pending = {p: group.engine(p).apply_async(_COMMAND, line) for p in processes}
        return {p: _answer(ar) for p, ar in pending.items()}

    Console(ask, sorted(failed), [chosen]).run(given or [], interactive=given is None)


def _example() -> str:
    """``commands="p x; w"``, or ``-c "p x; w"`` inside a magic."""
    return example("commands", "p x; w", text='"p x; w"')


def _commands(commands: str | Sequence[str] | None) -> list[str] | None:
    if commands is None:
        return None
    found = split_commands(commands) if isinstance(commands, str) else [str(c) for c in commands]
    if not found:
        raise ValueError(f"{option('commands')} got no command; e.g. {_example()}")
    return found


def _summaries(group: Group) -> dict[int, dict[str, Any]]:
    ar = group.view.apply_async(_SUMMARY)
    return dict(zip(group.indices, ar.get(timeout=ASK_SECONDS), strict=True))


def _choose(failed: dict[int, dict[str, Any]], process: int | None) -> int:
    """``process`` if it failed; by default the first to fail (an interrupt only if all were)."""
    if process is not None:
        if process not in failed:
            raise ValueError(f"{label(process)} did not fail in its last cell or run; "
                             f"{labels(failed)} did: {example('process', _choose(failed, None))}")
        return process
    raised = [p for p, s in failed.items() if not s["interrupted"]] or list(failed)
    return min(raised, key=lambda p: (failed[p]["at"], p))


def _answer(ar: Any) -> str:
    """A process's answer, or its error in one line (as pdb shows one)."""
    try:
        return str(ar.get(timeout=ANSWER_SECONDS))
    except Exception as exc:
        return error_answer(exc)
