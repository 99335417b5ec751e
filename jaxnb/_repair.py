"""Make a suspect cluster safe again: check that the processes agree, else reset the group.

After a partial error, a timeout or an interrupt (``cluster.suspect``), JAX
processes may be one collective apart: the next collective would pair with a
stale one and give a wrong value on one process and hang on another. Before
the next cell, :func:`ensure_ready` runs a tagged check collective
(:func:`jaxnb._engine.repair.check`); when it disagrees, fails or hangs,
:func:`reset` repairs the group in place: the old group's connections are cut,
then every process shuts ``jax.distributed`` down, clears its backends and
joins a new group on a new port. Python state is kept.
"""

from __future__ import annotations

import random
import sys
import time
from typing import TYPE_CHECKING, Any

from jaxnb import _health, _release, _stacks, _startup
from jaxnb._engine import process as engine_process
from jaxnb._engine import repair as engine_repair
from jaxnb._errors import ClusterStateError
from jaxnb._outputs import label, labels

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster

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


def ensure_ready(cluster: JaxCluster) -> None:
    """Before code runs on a suspect cluster: check the group, repair it, or say what to do."""
    reason = cluster.suspect
    if reason is None:
        return
    dead = _health.dead_processes(cluster)
    if dead:
        raise ClusterStateError(
            f"{_health.one_line(cluster, dead)}; the cluster cannot run cells: "
            "run `%jax_cluster restart`"
        )
    busy = _release.wait_idle(cluster, cluster.process_indices, BUSY_GRACE_SECONDS)
    if not _manages_group(cluster):
        still = _free(cluster, cut=False) if busy else []
        if still:
            raise ClusterStateError(_still_busy(cluster, still))
        cluster.suspect = None
        return
    if busy:
        note = reset(cluster)
        print(f"jaxnb: {labels(busy)} still busy after {reason}; {note}", file=sys.stderr)
        return
    if cluster._group_cut:
        note = reset(cluster)
        print(f"jaxnb: after {reason}, {note}", file=sys.stderr)
        return
    verdict = check(cluster)
    if verdict is None:
        cluster.suspect = None
        return
    note = reset(cluster)
    print(f"jaxnb: {verdict} after {reason}; {note}", file=sys.stderr)


def check(cluster: JaxCluster, seconds: float = CHECK_SECONDS) -> str | None:
    """``None`` when every process agrees on a fresh tag; else what went wrong."""
    tag = random.randrange(1, 2**31 - 1)
    pending = {
        p: cluster.client[cluster.engine_for(p)].apply_async(engine_repair.check, tag)
        for p in cluster.process_indices
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


def reset(cluster: JaxCluster) -> str:
    """Repair the ``jax.distributed`` group in place; a line saying what was done.

    Raises :class:`ClusterStateError` (saying to restart) when a process is dead
    or cannot be freed.
    """
    dead = _health.dead_processes(cluster)
    if dead:
        raise ClusterStateError(
            f"{_health.one_line(cluster, dead)}; a reset cannot bring it back: "
            "run `%jax_cluster restart`"
        )
    if not _manages_group(cluster):
        still = _free(cluster, cut=False)
        if still:
            raise ClusterStateError(_still_busy(cluster, still))
        cluster.suspect = None
        return "nothing to reset: jaxnb does not manage jax.distributed on this cluster"
    start = time.monotonic()
    _release.cut_collectives(cluster)
    still = _free(cluster, cut=True)
    if still:
        dumps = _stacks_of(cluster, still)
        still = [p for p in still if _stacks.where(dumps.get(p)) != "idle"]  # the hub lagged
        if still:
            raise ClusterStateError(_still_busy(cluster, still, dumps))
    _reinitialize(cluster)
    verdict = check(cluster, max(CHECK_SECONDS, cluster.options.init_timeout))
    if verdict is not None:
        cluster.suspect = f"a reset that did not hold ({verdict})"
        raise ClusterStateError(
            f"the group was re-initialised but {verdict}: run `%jax_cluster restart`"
        )
    cluster.suspect = None
    cluster._group_cut = False
    total = time.monotonic() - start
    warning = OLD_OBJECTS if _release.can_cut(cluster) else OLD_OBJECTS_REMOTE
    return f"repaired the jax.distributed group in place in {total:.1f} s. {warning}"


def _free(cluster: JaxCluster, cut: bool) -> list[int]:
    """Interrupt what still runs (its collectives are cut already when ``cut``); still busy."""
    left = _release.busy(cluster)
    if not left:
        return []
    _release.interrupt(cluster, left)
    wait = _release.CUT_WAIT_SECONDS + (_release.INTERRUPT_WAIT_SECONDS if cut else 0)
    return _release.wait_idle(cluster, left, wait)


def _stacks_of(cluster: JaxCluster, processes: list[int]) -> dict[int, str]:
    """Each process's stack dump, read from the process itself."""
    return _stacks.read(cluster, _stacks.request(cluster, processes))


def _still_busy(cluster: JaxCluster, still: list[int], dumps: dict[int, str] | None = None) -> str:
    dumps = dumps if dumps is not None else _stacks_of(cluster, still)
    where = "; ".join(f"{label(p)} at {_stacks.where(dumps.get(p))}" for p in still)
    if _release.can_cut(cluster):
        return (
            f"{where}: still busy after an interrupt and with its collectives closed; "
            "interrupt it again or run `%jax_cluster restart`"
        )
    timeout = cluster.options.collective_timeout
    return (
        f"{where}: still busy (probably inside a collective; XLA gives up after "
        f"{timeout} s); run the cell again then, or `%jax_cluster restart` now"
    )


def _reinitialize(cluster: JaxCluster) -> float:
    options = cluster.options
    n = cluster.num_processes
    coordinator = _startup.coordinator_address(cluster, cluster.engine_for(0))
    bind = coordinator if options.is_local else None
    placements = engine_process.placements([info.host for info in cluster.processes])
    pending = []
    for p in cluster.process_indices:
        local_ids = [placements[p][0]] if options.platform == "gpu" else None  # the local rank
        pending.append(
            cluster.client[cluster.engine_for(p)].apply_async(
                engine_repair.reinitialize,
                p,
                n,
                coordinator,
                bind,
                options.heartbeat_timeout,
                int(options.init_timeout),
                local_ids,
            )
        )
    deadline = time.monotonic() + options.init_timeout + 10
    seconds = 0.0
    for p, ar in enumerate(pending):
        try:
            seconds = max(seconds, ar.get(timeout=max(0.1, deadline - time.monotonic())))
        except Exception as exc:
            cluster.suspect = "a reset that failed"
            raise ClusterStateError(
                f"{label(p)} could not re-join jax.distributed ({_first_line(exc)}); "
                "run `%jax_cluster restart`"
            ) from None
    cluster._coordinator = coordinator
    return seconds


def _manages_group(cluster: JaxCluster) -> bool:
    """True when jaxnb initialised ``jax.distributed`` (more than one process, no --no-init)."""
    return cluster.options.init and cluster.num_processes > 1


def _first_line(exc: BaseException) -> str:
    name = getattr(exc, "ename", type(exc).__name__)
    value = str(getattr(exc, "evalue", exc)).strip().splitlines()
    return f"{name}: {value[0][:200]}" if value else name
