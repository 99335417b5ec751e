"""Make a suspect cluster safe again: check that the processes agree, else reset the group.

After a partial error, a timeout or an interrupt (``group.suspect``), JAX
processes may be one collective apart: the next collective would pair with a
stale one and give a wrong value on one process and hang on another. Before
the next cell, :func:`ensure_ready` runs a tagged check collective
(``jaxnb._engine.group.reset.check``); when it disagrees, fails or hangs,
:func:`reset` repairs the group in place: the old group's connections are cut,
then every process shuts ``jax.distributed`` down, clears its backends and
joins a new group on a new port. Python state is kept.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.join_plan import join_params
from jaxnb._core.messages import RESTART, first_line, label, labels
from jaxnb._core.state import Group, Suspect
from jaxnb._failures import detect, explain, free, stacks
from jaxnb._hosts import cut_outcome, site

_CHECK = EngineCall("jaxnb._engine.group.reset:check")
_REJOIN = EngineCall("jaxnb._engine.group.reset:reinitialize")

#: How long the check collective may take (it compiles two tiny programs the first time).
CHECK_SECONDS = 10.0
#: How long processes still running an earlier cell get before jaxnb frees them.
BUSY_GRACE_SECONDS = 0.5
OLD_OBJECTS = (
    "Python variables are kept, but meshes, shardings and jax.Arrays made before belong to "
    "the old group (their collectives now fail): make them again"
)
OLD_OBJECTS_REMOTE = (
    "Python variables are kept, but meshes, shardings and jax.Arrays made before belong to "
    "the old group: make them again before the next collective"
)


def _all_registered(group: Group) -> bool:
    """Every process's engine is still registered: a process that died between two cells may
    already be dropped by the controller (then ipyparallel fails on the missing engine)."""
    if group.client is None:
        return True
    registered = set(group.client.ids)
    return all(info.engine_id in registered for info in group.processes)


def ensure_ready(group: Group) -> None:
    """Before code runs on a suspect cluster: check the group, repair it, or say what to do."""
    reason = group.suspect
    if reason is None and _all_registered(group):
        return
    dead = detect.dead_processes(group)
    if reason is None and not dead:  # dropped by the controller, and nothing more is known
        registered = set(group.client.ids)
        dead = {i.process_index: "unregistered from the controller" for i in group.processes
                if i.engine_id not in registered}
    if dead:
        if group.suspect is None:
            group.mark_suspect(Suspect.PROCESS_DIED)
        raise ClusterStateError(
            f"{explain.one_line(group, dead)}; the cluster cannot run cells: {RESTART}"
        )
    busy = free.wait_idle(group, group.indices, BUSY_GRACE_SECONDS)
    if not _manages_group(group):
        still = _free(group, cut=False) if busy else []
        if still:
            raise ClusterStateError(_still_busy(group, still))
        group.clear_suspect()
        return
    if busy:
        note = reset(group)
        print(f"jaxnb: {labels(busy)} still busy after {reason}; {note}", file=sys.stderr)
        return
    if group.group_cut:
        note = reset(group)
        print(f"jaxnb: after {reason}, {note}", file=sys.stderr)
        return
    verdict = check(group)
    if verdict is None:
        group.clear_suspect()
        return
    note = reset(group)
    print(f"jaxnb: {verdict} after {reason}; {note}", file=sys.stderr)


def check(group: Group, seconds: float = CHECK_SECONDS) -> str | None:
    """``None`` when every process agrees on a fresh tag; else what went wrong."""
    tag = random.randrange(1, 2**31 - 1)
    pending = {
        p: group.engine(p).apply_async(_CHECK, tag)
        for p in group.indices
    }
    deadline = time.monotonic() + seconds
    replies: dict[int, Any] = {}
    while len(replies) < len(pending) and time.monotonic() < deadline:
        for p, ar in pending.items():
            if p not in replies and ar.ready():
                try:
                    replies[p] = ar.get(0)
                except Exception as exc:  # the check collective failed on p
                    name = getattr(exc, "ename", type(exc).__name__)
                    return f"the check collective failed on {label(p)} ({name})"
                if not _agrees(replies[p], tag, len(pending)):
                    return f"{label(p)} saw a stale collective from another process"
        time.sleep(0.01)
    missing = [p for p in pending if p not in replies]
    if missing:
        who = labels(missing)
        return f"the check collective did not finish on {who} within {seconds:g} s"
    counters = {reply["counter"] for reply in replies.values()}
    if len(counters) > 1:
        return "the processes had passed different numbers of checks"
    return None


def _agrees(reply: dict, tag: int, n: int) -> bool:
    rows = [[tag, reply["counter"]]] * n
    return reply["reduced"] == rows and reply["gathered"] == rows


def reset(group: Group) -> str:
    """Repair the ``jax.distributed`` group in place; a line saying what was done.

    Raises :class:`ClusterStateError` (saying to restart) when a process is dead
    or cannot be freed.
    """
    dead = detect.dead_processes(group)
    if dead:
        raise ClusterStateError(
            f"{explain.one_line(group, dead)}; a reset cannot bring it back: {RESTART}"
        )
    if not _manages_group(group):
        still = _free(group, cut=False)
        if still:
            raise ClusterStateError(_still_busy(group, still))
        group.clear_suspect()
        return "nothing to reset: jaxnb does not manage jax.distributed on this cluster"
    start = time.monotonic()
    free.cut_collectives(group)
    still = _free(group, cut=True)
    if still:
        dumps = _stacks_of(group, still)
        still = [p for p in still if stacks.where(dumps.get(p)) != "idle"]  # the hub lagged
        if still:
            raise ClusterStateError(_still_busy(group, still, dumps))
    _reinitialize(group)
    verdict = check(group, max(CHECK_SECONDS, group.options.init_timeout))
    if verdict is not None:
        group.mark_suspect(Suspect.RESET_DID_NOT_HOLD, verdict)
        raise ClusterStateError(
            f"the group was re-initialised but {verdict}: {RESTART}"
        )
    group.clear_suspect()
    group.group_cut = False
    group.repaired_at = now()
    total = time.monotonic() - start
    warning = OLD_OBJECTS if free.can_cut(group) else OLD_OBJECTS_REMOTE
    return f"repaired the jax.distributed group in place in {total:.1f} s. {warning}"


def now() -> str:
    """This moment as a user finds it again: the notebook cell running (``cell 7``), or the time."""
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython is not None else None
    stored = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if stored and len(stored) > 1:  # IPython stores a cell's input before it runs it
        return f"cell {len(stored) - 1}"
    return time.strftime("%H:%M:%S")


def _free(group: Group, cut: bool) -> list[int]:
    """Interrupt what still runs (its collectives are cut already when ``cut``); still busy."""
    left = free.busy(group)
    if not left:
        return []
    free.interrupt(group, left)
    wait = free.CUT_WAIT_SECONDS + (free.INTERRUPT_WAIT_SECONDS if cut else 0)
    return free.wait_idle(group, left, wait)


def _stacks_of(group: Group, processes: list[int]) -> dict[int, str]:
    """Each process's stack dump, read from the process itself."""
    return stacks.read(stacks.request(group, processes))


def _still_busy(group: Group, still: list[int], dumps: dict[int, str] | None = None) -> str:
    dumps = dumps if dumps is not None else _stacks_of(group, still)
    where = "; ".join(f"{label(p)} at {stacks.where(dumps.get(p))}" for p in still)
    if group.group_cut:  # connections were actually shut down
        return (
            f"{where}: still busy after an interrupt and with its collectives' connections "
            f"closed; interrupt it again or {RESTART}"
        )
    if free.can_cut(group):
        why = cut_outcome.why_not() or "none of them was found open"
        return (f"{where}: still busy after an interrupt; its collectives' connections were not "
                f"closed ({why}); interrupt it again or {RESTART}")
    timeout = group.options.collective_timeout
    return (
        f"{where}: still busy (probably inside a collective; XLA gives up after "
        f"{timeout} s); run the cell again then, or {RESTART} now"
    )


def _reinitialize(group: Group) -> float:
    """Every process leaves the group and joins a new one on a new port; seconds taken."""
    coordinator = site.of(group).coordinator_address(group, group.engine_for(0))
    hosts = [info.host for info in group.processes]
    pending = [
        group.engine(p).apply_async(_REJOIN, params)
        for p, params in enumerate(join_params(group.options, coordinator, hosts))
    ]
    deadline = time.monotonic() + group.options.init_timeout + 10
    seconds = 0.0
    for p, ar in enumerate(pending):
        try:
            seconds = max(seconds, ar.get(timeout=max(0.1, deadline - time.monotonic())))
        except Exception as exc:
            group.mark_suspect(Suspect.RESET_FAILED)
            raise ClusterStateError(
                f"{label(p)} could not re-join jax.distributed ({first_line(exc)}); {RESTART}"
            ) from None
    group.coordinator = coordinator
    return seconds


def _manages_group(group: Group) -> bool:
    """True when jaxnb initialised ``jax.distributed`` (more than one process, no --no-init)."""
    return group.options.init and group.size > 1
