"""Watch a running cell or training run: dead processes, divergence, timeouts, interrupts.

Each becomes a :class:`~jaxnb._core.errors.ProcessFailure` within seconds (or, for
an interrupt, a note before the ``KeyboardInterrupt``), naming the processes
and where the still-running ones wait. Processes left running are interrupted
and, if blocked in a collective, freed (:mod:`.free`); the group is then
marked suspect so that the next cell first checks it (:mod:`.repair`). A death
is handled the same way in a cell and in a training run (:func:`died`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import psutil

from jaxnb._core.errors import ProcessFailure, sections, traceback_text
from jaxnb._core.messages import RESET, RESTART, first_line, label, labels
from jaxnb._core.notebook_cells import remember_cell
from jaxnb._core.state import Group, Suspect
from jaxnb._failures import cause, detect, explain, free, stacks
from jaxnb._hosts import site

#: After the first process finishes, how long the others may still run before
#: jaxnb looks at where they are (they may be waiting in a collective).
DIVERGENCE_GRACE_SECONDS = 3.0
#: How often engine liveness is checked while a cell or training run runs (one look at the
#: local engines' processes and the controller's registrations: well under a millisecond).
LIVENESS_PERIOD_SECONDS = 0.1
#: A process using less CPU than this (in cores) counts as waiting, not computing.
WAITING_CPU = 0.25
AFTER = f"the next cell first checks that the processes agree (or {RESET})"
AFTER_CUT = f"the next cell first repairs the group (or {RESET})"
DISPATCHED = "work already dispatched to XLA is not cancelled"


def died(
    group: Group, dead: dict[int, str], running: list[int], code: str = "",
    errors: dict[int, Any] | None = None,
) -> ProcessFailure:
    """The error for a death, the same in a cell and in a training run: who died and how
    first, then what the others raised as a consequence (``errors``), then where the
    still-running ones were; those are stopped (without a peer they could only wait
    for JAX's heartbeat)."""
    where = stacks.collect(group, running, code) if running else ""
    survivors = free.stop_survivors(group, dead)
    group.mark_suspect(Suspect.PROCESS_DIED)
    notes = ["Where the other processes were:\n" + where if where else ""]
    if survivors:
        notes.append(
            f"jaxnb stopped {labels(survivors)}: without {labels(list(dead))} they could "
            "only wait for JAX's heartbeat timeout."
        )
    explain.settle_logs(group, list(dead))
    logs = {p: explain.engine_log(group, p) for p in dead}
    return cause.death_failure(
        dead, errors or {}, logs,
        lambda d: explain.describe_dead(group, d, code),
        lambda d: explain.one_line(group, d),
        notes,
    )


class Watch:
    """Checks one running cell or training run; :meth:`check` raises when it must not be
    waited on. Cells and training runs share it: one liveness period, one grace after the
    first process finishes, one way of releasing the processes left waiting."""

    def __init__(
        self, group: Group, code: str = "", timeout: float | None = None,
        requests: list[str] | None = None, where_others: bool = True,
    ):
        """``where_others=False``: a death's error skips where the other processes were (their
        stacks: a tenth of a second), for a training run that will recover from it."""
        self.group = group
        self.where_others = where_others
        self.code = code
        self.timeout = timeout
        self.started = time.monotonic()
        self.first_done: float | None = None
        #: The processes found dead (index -> how they ended), once a death was raised.
        self.dead: dict[int, str] = {}
        #: When (``time.monotonic``) that death was seen, before the survivors were stopped.
        self.seen_at: float | None = None
        self._next_liveness = self.started + LIVENESS_PERIOD_SECONDS
        self._next_look = 0.0
        self._cpu: dict[int, float] = {}
        remember_cell(code)
        explain.mark_logs(group, requests)

    def check(self, done: set[int], by_process: dict[int, dict]) -> None:
        """Raise :class:`ProcessFailure` on a dead process, divergence or a timeout."""
        now = time.monotonic()
        if now >= self._next_liveness:
            self._next_liveness = now + LIVENESS_PERIOD_SECONDS
            dead = detect.dead_processes(self.group)
            if dead:
                self.dead, self.seen_at = dict(dead), time.monotonic()
                running = [p for p in by_process if p not in done and p not in dead]
                shown = running if self.where_others else []
                raise died(self.group, dead, shown, self.code, _errors_of(by_process))
        running = [p for p in by_process if p not in done]
        if done and running:
            if self.first_done is None:
                self.first_done = now
                self._next_look = now + DIVERGENCE_GRACE_SECONDS
                self._cpu = self._cpu_seconds(running)
            elif now >= self._next_look:
                self._look_for_divergence(done, running, by_process)
        if self.timeout is not None and now - self.started > self.timeout:
            running = running or list(by_process)
            dumps = stacks.read(stacks.request(self.group, running))
            self._fail(
                f"the cell ran past its timeout of {self.timeout:g} s ({self._at(running, dumps)})",
                Suspect.TIMED_OUT,
                running,
                by_process,
                dumps,
            )

    def check_dead(self, by_process: dict[int, dict]) -> None:
        """After the cell: raise if a process died, whatever the others returned."""
        dead = detect.dead_processes(self.group)
        if dead:
            self.dead, self.seen_at = dict(dead), time.monotonic()
            raise died(self.group, dead, [], self.code, _errors_of(by_process))

    def pause(self, seconds: float) -> None:
        """The processes sat at ``jaxnb.breakpoint()`` for ``seconds``: the timeout does not run
        down meanwhile, and the grace before looking for divergence starts again."""
        self.started += seconds
        self.first_done = None

    def where_now(self, processes: list[int]) -> str:
        """``[p2] at cell line 7: …; [p3] not in the cell yet``: where these processes are now."""
        return self._where(processes, stacks.read(stacks.request(self.group, processes)))

    # ---- divergence and timeouts -------------------------------------------------------

    def _look_for_divergence(self, done: set[int], running: list[int], by_process: dict) -> None:
        dumps = stacks.read(stacks.request(self.group, running))
        errors = [p for p in done if by_process[p].get("error") is not None]
        if not errors and not all(self._waiting(p, dumps.get(p)) for p in running):
            # Everyone else finished cleanly and these are busy with their own work.
            self._next_look = time.monotonic() + DIVERGENCE_GRACE_SECONDS
            self._cpu = self._cpu_seconds(running)
            return
        finished = []
        for p in sorted(done):
            error = by_process[p].get("error")
            how = f"raised {first_line(error, 120)}" if error is not None else "finished"
            finished.append(f"{label(p)} {how}")
        self._fail(
            f"processes diverged: {'; '.join(finished)}; {self._at(running, dumps)}",
            Suspect.DIVERGED,
            running,
            by_process,
            dumps,
        )

    def _at(self, running: list[int], dumps: dict[int, str]) -> str:
        return f"still running: {self._where(running, dumps)}"

    def _where(self, processes: list[int], dumps: dict[int, str]) -> str:
        """``[p0], [p1] at cell line 3: …; [p2] not in the cell yet`` (from the stack dumps)."""
        places: dict[str, list[int]] = {}
        for p in processes:
            where = stacks.where(dumps.get(p), self.code)
            places.setdefault("not in the cell yet" if where == "idle" else f"at {where}", []).append(p)
        return "; ".join(f"{labels(ps)} {where}" for where, ps in places.items())

    def _waiting(self, p: int, dump: str | None) -> bool:
        """Blocked (in a collective, probably) rather than computing or sleeping.

        Local engines: the main thread waits on a futex (JAX waits so for XLA;
        ``time.sleep`` or socket reads do not) and the process used little CPU
        since the last look. Remote engines: the innermost frame is in JAX.
        """
        if not site.of(self.group).inspects_processes:
            return stacks.waiting_in_jax(dump)
        wchan = _wchan(self.group.processes[p].pid)
        if wchan.strip("0\n") and "futex" not in wchan:
            return False
        if not wchan.strip("0\n") and not stacks.waiting_in_jax(dump):
            return False
        before = self._cpu.get(p)
        after = self._cpu_seconds([p]).get(p)
        if before is None or after is None:
            return True
        elapsed = max(time.monotonic() - (self._next_look - DIVERGENCE_GRACE_SECONDS), 1e-3)
        return (after - before) / elapsed < WAITING_CPU

    def _cpu_seconds(self, processes: list[int]) -> dict[int, float]:
        if not site.of(self.group).inspects_processes:
            return {}
        found = {}
        for p in processes:
            try:
                times = psutil.Process(self.group.processes[p].pid).cpu_times()
            except psutil.Error:
                continue
            found[p] = times.user + times.system
        return found

    def _fail(
        self,
        what: str,
        reason: Suspect,
        running: list[int],
        by_process: dict,
        dumps: dict[int, str],
    ) -> None:
        where = "\n".join(stacks.section(self.group, p, dumps.get(p), self.code) for p in running)
        released = free.release(self.group, running)
        self.group.mark_suspect(reason)
        raised = [sections([p], traceback_text(by_process[p]["error"])) for p in sorted(by_process)
                  if p not in running and by_process[p].get("error") is not None]
        notes = ["Where each still-running process was:\n" + where, _release_note(running, released)]
        then = AFTER_CUT if released.cut else AFTER
        raise ProcessFailure(f"{what}. jaxnb interrupted {labels(running)}; {then}", running,
                             [shown for shown, _ in raised] + notes,
                             "\n".join([full for _, full in raised] + notes))

    # ---- interrupts ------------------------------------------------------------------

    def interrupted(self, by_process: dict[int, Any]) -> None:
        """Forward a kernel interrupt to every running process; say what happened."""
        running = [p for p, md in by_process.items() if md.get("completed") is None]
        if not running:
            return
        self.group.mark_suspect(Suspect.CELL_INTERRUPTED)
        paths = stacks.request(self.group, running)
        released = free.release(self.group, running)
        dumps = stacks.read(paths, timeout=0.2)
        lines = [f"jaxnb: interrupted {labels(running)} ({self._where(running, dumps)}); {DISPATCHED}."]
        lines.append(_release_note(running, released))
        if released.left:
            lines.append("\n".join(stacks.section(self.group, p, dumps.get(p), self.code)
                                   for p in released.left))
        lines.append(f"jaxnb: {AFTER_CUT if released.cut else AFTER}.")
        print("\n".join(line for line in lines if line), file=sys.stderr)


def _wchan(pid: int) -> str:
    """The kernel function the process's main thread sleeps in ("" if unknown)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""


def _release_note(running: list[int], released: free.Released) -> str:
    stopped = [p for p in running if p not in released.left]
    parts = []
    if released.cut:
        verb = "was" if len(released.blocked) == 1 else "were"
        parts.append(
            f"{labels(released.blocked)} {verb} blocked in a collective: jaxnb closed the "
            "group's connections to free them."
        )
    if stopped:
        parts.append(f"{labels(stopped)} stopped.")
    if released.left:
        parts.append(
            f"{labels(released.left)} still running (computing, or blocked in a collective that "
            f"jaxnb cannot free); the next cell waits for it, or {RESTART}."
        )
    return " ".join(parts)


def _errors_of(by_process: dict[int, dict]) -> dict[int, Any]:
    return {p: md["error"] for p, md in by_process.items() if md.get("error") is not None}

