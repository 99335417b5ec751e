"""``jaxnb.breakpoint()`` seen from the notebook: while a cell or training run runs, the processes
that stop are gathered, the prompt opens, commands go to them, ``c`` lets them all go on.

A process that reaches the call publishes where it stopped (``contract.BREAKPOINT_KEY`` on
ipyparallel's data channel) and waits (:mod:`jaxnb._engine.debug.stop`). :meth:`Stops.check`,
called by the cell's and the run's polling loop before the watcher's own check, waits a
moment for the other running processes to stop too, says which stopped where and where the
others are (the watcher reads their stacks), and runs the prompt (:mod:`.prompt`): commands
go to the stopped processes on their engines' control channel, which their ipykernel serves
while the cell runs. Meanwhile the watcher does not run: the time spent stopped is not
counted against ``--timeout``, nor as divergence (:meth:`Watch.pause`).

Headless (papermill, a ``--background`` run), the processes go on at once, after one note,
unless ``%jax_debug -c`` gave commands for the breakpoint first.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from jaxnb._core import ipp_internals
from jaxnb._core.contract import BREAKPOINT_KEY, EngineCall
from jaxnb._core.messages import first_line, label, labels
from jaxnb._core.state import Group
from jaxnb._debug.prompt import Console, SessionOver, error_answer, stdin_available
from jaxnb._failures import detect
from jaxnb._failures.watch import Watch

_COMMAND = EngineCall("jaxnb._engine.debug.stop:command")
_RESUME = EngineCall("jaxnb._engine.debug.stop:resume")
_READY = EngineCall("jaxnb._engine.debug.hooks:ready")
#: How long the first stop of a cluster waits for the control channel's answer to a ping.
PING_SECONDS = 2.0
#: How long a command's answers may take in all before the session ends (the processes go on).
ANSWER_SECONDS = 120.0
#: How long the first stopped process waits for the other running ones before the prompt opens.
GATHER_SECONDS = 1.0
#: After this long without an answer, the notebook says what the process may be waiting for.
SLOW_ANSWER_SECONDS = 10.0
#: How long letting the processes go on may take (seconds).
RESUME_SECONDS = 30.0
SLOW = ("jaxnb: still waiting for {who}'s answer: a command that computes on a global array "
        "waits for every process (send it with all:); interrupt to end the cell")
NO_ROUTE = ("jaxnb: jaxnb.breakpoint() cannot be debugged here: {why}; interrupting {who} "
            "(no process stays stopped)")
GAVE_UP = ("jaxnb: {who} did not go on within {seconds:g} s of c; interrupting {who} "
           "(no process stays stopped)")
HEADLESS = ("jaxnb: jaxnb.breakpoint() at {where} did not stop {who}: no input prompt here "
            "(headless, or a --background run); give it commands with %jax_debug -c before the cell")


class Stops:
    """The breakpoint stops of one running cell or training run (see the module's docstring)."""

    def __init__(self, group: Group, watch: Watch, data: dict[int, dict[str, Any]]) -> None:
        self.group, self.watch, self.data = group, watch, data
        #: The last stop handled, by process (stop numbers grow on each process).
        self.handled = {p: 0 for p in data}
        self.first_seen: float | None = None
        self.commands = group.breakpoint_commands
        self.noted = False

    def pending(self) -> dict[int, dict[str, Any]]:
        """The processes stopped now (and not let go yet): where each stopped."""
        found = {}
        for p, data in self.data.items():
            stop = data.get(BREAKPOINT_KEY)
            if stop and stop["id"] > self.handled[p]:
                found[p] = stop
        return found

    def check(self, done: set[int], errors: dict[int, Any]) -> bool:
        """Open the prompt once the stopped processes are gathered; return when they go on.
        True when a session ran (what the caller knew of the processes is stale now)."""
        stopped = self.pending()
        if not stopped:
            return False
        now = time.monotonic()
        self.first_seen = self.first_seen or now
        running = [p for p in self.data if p not in done]
        if len(stopped) < len(running) and now - self.first_seen < GATHER_SECONDS:
            return False  # the others may be on their way to the same line
        began, self.first_seen = self.first_seen, None
        try:
            self._session(stopped, [p for p in running if p not in stopped], done, errors)
        finally:
            self.handled.update({p: stop["id"] for p, stop in stopped.items()})
            self.watch.pause(time.monotonic() - began)
        return True

    def _session(self, stopped: dict[int, dict[str, Any]], elsewhere: list[int], done: set[int],
                 errors: dict[int, Any]) -> None:
        why = self._route_missing(stopped)
        if why is not None:
            print(NO_ROUTE.format(why=why, who=labels(stopped)))
            self._interrupt(stopped)
            return
        interactive = stdin_available()
        if not interactive and self.commands is None:
            if not self.noted:
                self.noted = True
                first = stopped[min(stopped)]
                print(HEADLESS.format(where=first["where"], who=labels(stopped)))
            self._resume(stopped, quit=False)
            return
        print(self._header(stopped, elsewhere, done, errors, interactive))
        if self.commands is not None:
            self.group.breakpoint_commands = None  # they answer this cell's or run's stops
        ask = lambda processes, line: self._ask(stopped, processes, line)  # noqa: E731
        ended = Console(ask, sorted(stopped), sorted(stopped)).run(self.commands or [], interactive)
        if not ended:
            print(f"jaxnb: {labels(stopped)} go on (the commands ran out; no input prompt here)")
        self._resume(stopped, quit=ended == "q")

    def _header(self, stopped: dict[int, dict[str, Any]], elsewhere: list[int], done: set[int],
                errors: dict[int, Any], interactive: bool) -> str:
        places: dict[str, list[int]] = {}
        for p, stop in stopped.items():
            source = f": {stop['source']}" if stop.get("source") else ""
            places.setdefault(f"{stop['where']}{source}", []).append(p)
        lines = [f"jaxnb: {labels(ps)} stopped at jaxnb.breakpoint(), {where}"
                 for where, ps in places.items()]
        if elsewhere:
            lines.append(f"jaxnb: not stopped: {self.watch.where_now(elsewhere)}")
        for p in sorted(done):
            how = f"raised {first_line(errors[p], 120)}" if errors.get(p) is not None else "finished"
            lines.append(f"jaxnb: {label(p)} {how}")
        if interactive:
            lines.append("jaxnb: p1: COMMAND for one process, all: COMMAND for all, c continues "
                         "them all, h for help")
        return "\n".join(lines)

    def _ask(self, stopped: dict[int, dict[str, Any]], processes: list[int], line: str) -> dict[int, str]:
        """Send ``line`` to ``processes`` at once; their answers."""
        client = self.group.client
        pending = {p: ipp_internals.control_apply(client, self.group.engine_for(p), _COMMAND,
                                                  stopped[p]["id"], line) for p in processes}
        slow_at, next_look = time.monotonic() + SLOW_ANSWER_SECONDS, time.monotonic() + 1.0
        give_up = time.monotonic() + ANSWER_SECONDS
        answers: dict[int, str] = {}
        while True:
            answers.update({p: _answer(f) for p, f in pending.items() if p not in answers and f.done()})
            if len(answers) == len(pending):
                return answers
            time.sleep(0.01)
            now = time.monotonic()
            if now > slow_at:
                slow_at = float("inf")
                print(SLOW.format(who=labels(p for p in pending if p not in answers)))
            if now > give_up:
                raise SessionOver(f"{labels(p for p in pending if p not in answers)} gave no "
                                  f"answer within {ANSWER_SECONDS:g} s; the session ends")
            if now > next_look:  # a process that died never answers
                next_look = now + 1.0
                dead = detect.dead_processes(self.group)
                if dead:
                    raise SessionOver(f"{labels(dead)} died during the debugging session")

    def _resume(self, stopped: dict[int, dict[str, Any]], quit: bool) -> None:
        """Let every stopped process go on (or raise ``BdbQuit`` there, for ``q``); one that
        does not answer in :data:`RESUME_SECONDS` is interrupted instead."""
        client = self.group.client
        deadline = time.monotonic() + RESUME_SECONDS
        late = {}
        for p, stop in stopped.items():
            try:
                future = ipp_internals.control_apply(client, self.group.engine_for(p), _RESUME,
                                                     stop["id"], quit)
                future.result(timeout=max(deadline - time.monotonic(), 0.1))
            except Exception:  # no answer: the control route is gone; SIGINT is not
                late[p] = stop
        if late:
            print(GAVE_UP.format(who=labels(late), seconds=RESUME_SECONDS))
            self._interrupt(late)

    def _interrupt(self, stopped: dict[int, dict[str, Any]]) -> None:
        """Interrupt the stopped processes (their cell or run ends with ``KeyboardInterrupt``)."""
        from jaxnb._failures import free

        free.signal_processes(self.group, sorted(stopped), signal.SIGINT)

    def _route_missing(self, stopped: dict[int, dict[str, Any]]) -> str | None:
        """Why the notebook cannot reach the stopped processes (``None``: it can); the control
        channel is pinged once per cluster."""
        why = ipp_internals.control_route_missing(self.group.client)
        if why is not None or id(self.group) in _pinged:
            return why
        p = min(stopped)
        try:
            future = ipp_internals.control_apply(self.group.client, self.group.engine_for(p), _READY)
            future.result(timeout=PING_SECONDS)
        except Exception as exc:
            return (f"{label(p)}'s control channel did not answer within {PING_SECONDS:g} s "
                    f"({type(exc).__name__})")
        _pinged.add(id(self.group))
        return None


#: The clusters whose control channel answered a ping (by ``id`` of their group).
_pinged: set[int] = set()


def _answer(future: Any) -> str:
    """A process's answer, or its error in one line (as pdb shows one)."""
    try:
        return str(ipp_internals.reply_value(future.result()))
    except Exception as exc:
        return error_answer(exc)
