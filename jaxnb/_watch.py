"""Watch a running cell: dead processes, divergence, timeouts, interrupts.

Each becomes a :class:`~jaxnb._errors.ProcessFailure` within seconds (or, for
an interrupt, a note before the ``KeyboardInterrupt``), naming the processes
and where the still-running ones wait. Processes left running are interrupted
and, if blocked in a collective, freed (:mod:`jaxnb._release`); the cluster is
then marked suspect so that the next cell first checks the group
(:mod:`jaxnb._repair`).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import psutil

from jaxnb import _health, _release, _stacks
from jaxnb._errors import ProcessFailure
from jaxnb._outputs import label, labels

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

#: After the first process finishes, how long the others may still run before
#: jaxnb looks at where they are (they may be waiting in a collective).
DIVERGENCE_GRACE_SECONDS = 3.0
#: How often engine liveness is checked while a cell runs.
LIVENESS_PERIOD_SECONDS = 0.25
#: A process using less CPU than this (in cores) counts as waiting, not computing.
WAITING_CPU = 0.25
AFTER = "the next cell first checks that the processes agree (or run `%jax_cluster reset`)"
AFTER_CUT = "the next cell first repairs the group (or run `%jax_cluster reset`)"
DISPATCHED = "work already dispatched to XLA is not cancelled"


class CellWatch:
    """Checks one running cell; :meth:`check` raises when it must not be waited on."""

    def __init__(self, cluster: JaxCluster, code: str, timeout: float | None):
        self.cluster = cluster
        self.code = code
        self.timeout = timeout
        self.started = time.monotonic()
        self.first_done: float | None = None
        self._next_liveness = self.started + LIVENESS_PERIOD_SECONDS
        self._next_look = 0.0
        self._cpu: dict[int, float] = {}
        _stacks.remember_cell(code)

    def check(self, done: set[int], by_process: dict[int, dict]) -> None:
        """Raise :class:`ProcessFailure` on a dead process, divergence or a timeout."""
        now = time.monotonic()
        if now >= self._next_liveness:
            self._next_liveness = now + LIVENESS_PERIOD_SECONDS
            dead = _health.dead_processes(self.cluster)
            if dead:
                running = [p for p in by_process if p not in done and p not in dead]
                self._fail_dead(dead, running, by_process)
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
            dumps = _stacks.read(self.cluster, _stacks.request(self.cluster, running))
            self._fail(
                f"the cell ran past its timeout of {self.timeout:g} s ({self._at(running, dumps)})",
                "a cell timed out",
                running,
                by_process,
                dumps,
            )

    # ---- the three failures ----------------------------------------------------------

    def _fail_dead(self, dead: dict[int, str], running: list[int], by_process: dict) -> None:
        stacks = _stacks.collect(self.cluster, running, self.code) if running else ""
        survivors = _health.stop_survivors(self.cluster, dead)
        self.cluster.suspect = "a process died"
        notes = ["Where the other processes were:\n" + stacks if stacks else ""]
        if survivors:
            notes.append(
                f"jaxnb stopped {labels(survivors)}: without {labels(list(dead))} they could "
                "only wait for JAX's heartbeat timeout."
            )
        errors = {p: md["error"] for p, md in by_process.items() if md.get("error") is not None}
        raise _health.death_failure(self.cluster, dead, errors, self.code, notes)

    def check_dead(self, by_process: dict[int, dict]) -> None:
        """After the cell: raise if a process died, whatever the others returned."""
        dead = _health.dead_processes(self.cluster)
        if dead:
            self._fail_dead(dead, [], by_process)

    def _look_for_divergence(self, done: set[int], running: list[int], by_process: dict) -> None:
        dumps = _stacks.read(self.cluster, _stacks.request(self.cluster, running))
        errors = [p for p in done if by_process[p].get("error") is not None]
        if not errors and not all(self._waiting(p, dumps.get(p)) for p in running):
            # Everyone else finished cleanly and these are busy with their own work.
            self._next_look = time.monotonic() + DIVERGENCE_GRACE_SECONDS
            self._cpu = self._cpu_seconds(running)
            return
        finished = []
        for p in sorted(done):
            error = by_process[p].get("error")
            how = f"raised {_one_line(error)}" if error is not None else "finished"
            finished.append(f"{label(p)} {how}")
        self._fail(
            f"processes diverged: {'; '.join(finished)}; {self._at(running, dumps)}",
            "processes diverged",
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
            where = _stacks.where(dumps.get(p), self.code)
            places.setdefault("not in the cell yet" if where == "idle" else f"at {where}", []).append(p)
        return "; ".join(f"{labels(ps)} {where}" for where, ps in places.items())

    def _waiting(self, p: int, dump: str | None) -> bool:
        """Blocked (in a collective, probably) rather than computing or sleeping.

        Local engines: the main thread waits on a futex (JAX waits so for XLA;
        ``time.sleep`` or socket reads do not) and the process used little CPU
        since the last look. Remote engines: the innermost frame is in JAX.
        """
        if not self.cluster.options.is_local:
            return _stacks.waiting_in_jax(dump)
        wchan = _wchan(self.cluster.processes[p].pid)
        if wchan.strip("0\n") and "futex" not in wchan:
            return False
        if not wchan.strip("0\n") and not _stacks.waiting_in_jax(dump):
            return False
        before = self._cpu.get(p)
        after = self._cpu_seconds([p]).get(p)
        if before is None or after is None:
            return True
        elapsed = max(time.monotonic() - (self._next_look - DIVERGENCE_GRACE_SECONDS), 1e-3)
        return (after - before) / elapsed < WAITING_CPU

    def _cpu_seconds(self, processes: list[int]) -> dict[int, float]:
        if not self.cluster.options.is_local:
            return {}
        found = {}
        for p in processes:
            try:
                times = psutil.Process(self.cluster.processes[p].pid).cpu_times()
            except psutil.Error:
                continue
            found[p] = times.user + times.system
        return found

    def _fail(
        self,
        what: str,
        reason: str,
        running: list[int],
        by_process: dict,
        dumps: dict[int, str],
    ) -> None:
        stacks = "\n".join(_stacks.section(self.cluster, p, dumps.get(p), self.code) for p in running)
        released = _release.release(self.cluster, running)
        self.cluster.suspect = reason
        notes = [
            _traceback(p, by_process[p]["error"])
            for p in sorted(by_process)
            if p not in running and by_process[p].get("error") is not None
        ]
        notes.append("Where each still-running process was:\n" + stacks)
        notes.append(_release_note(running, released))
        then = AFTER_CUT if released.cut else AFTER
        raise ProcessFailure(f"{what}. jaxnb interrupted {labels(running)}; {then}", running, notes)

    # ---- interrupts ------------------------------------------------------------------

    def interrupted(self, by_process: dict[int, Any]) -> None:
        """Forward a kernel interrupt to every running process; say what happened."""
        running = [p for p, md in by_process.items() if md.get("completed") is None]
        if not running:
            return
        self.cluster.suspect = "a cell was interrupted"
        paths = _stacks.request(self.cluster, running)
        released = _release.release(self.cluster, running)
        dumps = _stacks.read(self.cluster, paths, timeout=0.2)
        lines = [f"jaxnb: interrupted {labels(running)} ({self._where(running, dumps)}); {DISPATCHED}."]
        lines.append(_release_note(running, released))
        if released.left:
            lines.append("\n".join(_stacks.section(self.cluster, p, dumps.get(p), self.code)
                                   for p in released.left))
        lines.append(f"jaxnb: {AFTER_CUT if released.cut else AFTER}.")
        print("\n".join(line for line in lines if line), file=sys.stderr)


def _one_line(error: Any, width: int = 120) -> str:
    value = (str(getattr(error, "evalue", error)).strip().splitlines() or [""])[0]
    text = f"{getattr(error, 'ename', type(error).__name__)}: {value}"
    return text if len(text) <= width else text[: width - 3] + "..."


def _wchan(pid: int) -> str:
    """The kernel function the process's main thread sleeps in ("" if unknown)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""


def _release_note(running: list[int], released: _release.Released) -> str:
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
            "jaxnb cannot free); the next cell waits for it, or run `%jax_cluster restart`."
        )
    return " ".join(parts)


def _traceback(p: int, error: Any) -> str:
    from jaxnb._spmd import _traceback_text

    return f"---- {label(p)} ----\n{_traceback_text(error)}"
