"""Warm spares: engines started, JAX imported, registered, not joined — a restart only joins.

A cluster on this machine or on ``--hosts`` (over ssh) keeps one spare engine per
process (``spares``; 0 turns them off; the site says which keep them): on ssh hosts
they are started by the same launcher as the group's engines, as many on each host as
the group has there. A restart that finds a spare registered for every process
SIGKILLs the group's old engines (through the site: by pid here, over ssh on their
hosts), joins the spares into a new ``jax.distributed`` group (new processes, empty
namespaces: the same as a full restart for the user) and starts new spares in the
background; the controller stays. Spares launched and still starting are waited for (they
are what a full restart would start anyway); without enough spares, the restart stops and
starts everything as before, and says why in its phases (:mod:`.refill`). New spares start
once the new group reported its first step (importing JAX would slow its compilation), so a
second failure seconds later swaps as fast as the first. Batch launchers (mpi, slurm) get
no spares.

A shrink (a ``--min-processes`` run that goes on without a lost host) swaps the same way:
the spares on the hosts left join as the smaller group, the old engines there are SIGKILLed,
and the lost host's engine and spare are given up (that host does not answer: each ssh try
would wait out ssh's timeout; a stop or a grow tries it again). New spares start on the
group's hosts only.

A spare is known by the pid its launcher started: the engine itself here, the shell
around the engine on an ssh host (the engine's parent).

Spares are warm for this run: they import the third-party modules the setup's cells
imported (:func:`warm`: the registered ones at once, later ones before they register) and
jaxnb's training modules, so a swap finds Flax, Optax, Orbax … imported
(:mod:`jaxnb._engine.boot.warm`). They never run the user's code.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from jaxnb._core import ipp_internals
from jaxnb._core.contract import ENV_WARM_MODULES, EngineCall
from jaxnb._core.host_entries import engine_counts
from jaxnb._core.options import ClusterOptions
from jaxnb._core.phases import JOIN, START, STOP, Stopwatch
from jaxnb._core.state import Group
from jaxnb._hosts import processes, reachability, remote_launchers, site, ssh
from jaxnb._lifecycle import refill, startup

_PIDS = EngineCall("jaxnb._engine.group.process:pids")
_WARM = EngineCall("jaxnb._engine.boot.warm:import_modules")

#: How long a restart waits for spares that are still starting (they register within
#: seconds; a full restart would start the same engines from scratch).
STARTING_WAIT_SECONDS = 20.0
_lock = threading.Lock()  # one top-up or swap at a time


def wanted(group: Group) -> int:
    """How many spares ``group`` keeps (on this machine or ssh hosts: one per process)."""
    return site.of(group).spares(group.options)


@contextlib.contextmanager
def held(seconds: float = 30.0) -> Iterator[None]:
    """No top-up or swap runs meanwhile (a stop waits for one under way, at most ``seconds``:
    spares launched after the stop would be left on their hosts)."""
    got = _lock.acquire(timeout=seconds)
    try:
        yield
    finally:
        if got:
            _lock.release()


def top_up(group: Group) -> None:
    """Start spares until ``group`` has :func:`wanted` of them (they register on their own)."""
    with _lock:
        _top_up(group, group.ipp)


def top_up_later(group: Group, delay: float = refill.SETTLE_SECONDS) -> None:
    """:func:`top_up` once the group reported its first step (or in ``delay`` seconds), in the
    background, unless the cluster was stopped meanwhile."""
    ipp_cluster = group.ipp
    record = refill.of(group)

    def run() -> None:
        record.wait_settled(delay)
        with _lock, contextlib.suppress(Exception):  # no spares: restarts take the slow way
            _top_up(group, ipp_cluster)

    threading.Thread(target=run, name="jaxnb-spares", daemon=True).start()


def _top_up(group: Group, ipp_cluster: Any) -> None:
    missing = wanted(group) - len(_alive(group, group.spare_pids))
    if missing <= 0 or ipp_cluster is None or group.ipp is not ipp_cluster or group.engine_env is None:
        return
    before = set(_launchers(ipp_cluster))
    env = {**group.engine_env, ENV_WARM_MODULES: ",".join(group.warm_modules)}
    refill.of(group).launched()
    where = _spare_places(group, ipp_cluster, missing)
    ipp_cluster.start_engines_sync(n=missing, environment=env, **({"engines": where} if where else {}))
    group.spare_pids.update(set(_launchers(ipp_cluster)) - before)
    group.launchers.update(ipp_internals.launched_engines(ipp_cluster))
    site.of(group).deliver_connection_file(ipp_cluster, group.options)  # ssh hosts: they wait for it


def _spare_places(group: Group, ipp_cluster: Any, missing: int) -> dict[str, int] | None:
    """ssh target → spares to start there: where the group's processes outnumber its living
    spares (after a shrink: not on the hosts left out); None: where the launcher would."""
    launcher_class = getattr(ipp_cluster, "engine_launcher_class", None)
    if not (isinstance(launcher_class, type) and issubclass(launcher_class, ssh.FastSSHEngineSetLauncher)):
        return None
    launchers = _launchers(ipp_cluster)
    have = collections.Counter(ssh.place(launchers.get(pid))[0] for pid in _alive(group, group.spare_pids))
    lacking = places(group) - have
    return dict(lacking) if sum(lacking.values()) == missing else None


def warm(group: Group, modules: list[str]) -> None:
    """Remember ``modules`` (third-party, imported by a setup cell) for spares started later,
    and have the spares registered now import them (not waited for)."""
    new = [m for m in modules if m not in group.warm_modules]
    if not new or wanted(group) == 0 or group.client is None:
        return
    group.warm_modules.extend(new)
    members = {info.engine_id for info in group.processes}
    idle = [eid for eid in group.client.ids if eid not in members]
    if idle:
        group.client[idle].apply_async(_WARM, new)


def ready(group: Group) -> list[int]:
    """Engine ids of registered, living spares: one for each process, on its host."""
    return list(_ready(group, places(group)))


def places(group: Group, options: ClusterOptions | None = None) -> collections.Counter[str]:
    """``--hosts`` target → how many processes run there: the group's now, or with
    ``options`` (the same cluster at another size); ``""`` on this machine."""
    if options is None:
        return collections.Counter(_target(group, p) for p in group.indices)
    if not options.hosts:
        return collections.Counter({"": options.resolved_n()})
    return collections.Counter(engine_counts(options.host_entries()))


def _ready(group: Group, need: collections.Counter[str]) -> dict[int, int]:
    """Engine id → launched pid of spares for the places ``need`` (none when too few)."""
    if group.client is None or not group.spare_pids:
        return {}
    members = {info.engine_id for info in group.processes}
    candidates = [eid for eid in group.client.ids if eid not in members]
    if len(candidates) < sum(need.values()):
        return {}
    try:
        families = group.client[candidates].apply_async(_PIDS).get(timeout=5)
    except Exception:  # a spare died or is still starting: restart the slow way
        return {}
    alive = _alive(group, group.spare_pids)
    launchers = _launchers(group.ipp)
    need = collections.Counter(need)
    found = {}
    for eid, family in zip(candidates, families, strict=True):
        pid = next((pid for pid in family[:2] if pid in alive), None)
        if pid is None:
            continue
        target = ssh.place(launchers.get(pid))[0]
        if need[target] > 0:
            found[eid] = pid
            need[target] -= 1
    return found if sum(need.values()) == 0 else {}


def swap(group: Group, phases: Stopwatch | None = None, shrink: ClusterOptions | None = None) -> bool:
    """Replace the group's engines by spares and join them; False when too few are ready.
    ``phases``: where the seconds of finding them, stopping the old engines and joining go,
    and, when none was ready, why (:data:`refill.NO_SPARE`). ``shrink``: the options of a
    smaller group whose places are among the group's own, the hosts it leaves out unreachable
    (:func:`can_shrink`): the group takes them before it joins."""
    phases = Stopwatch() if phases is None else phases
    with _lock:
        swapped = _swap(group, phases, shrink)
    if swapped:
        refill.of(group).taken()
        top_up_later(group)
    return swapped


def can_shrink(group: Group, options: ClusterOptions) -> bool:
    """Whether ``options`` keep some of the group's places and leave out only hosts found
    unreachable (a ``--min-processes`` run that goes on without them): a swap can do it."""
    now, then = places(group), places(group, options)
    gone = [t for t in now if t not in then]
    return (bool(gone) and all(then[t] <= now[t] for t in then)
            and all(reachability.unreachable_now(_location(group, t)) for t in gone))


def _swap(group: Group, phases: Stopwatch, shrink: ClusterOptions | None) -> bool:
    need = places(group, shrink)
    gone = [p for p in group.indices if _target(group, p) not in need]
    if gone:
        _give_up_spares(group, set(places(group)) - set(need))
    with phases.timed(START):
        spares = _ready(group, need)
    if not spares:
        spares = _wait_starting(group, phases, need)
    if not spares:
        return False
    for p in gone:  # its host does not answer: its engine cannot be killed from here now
        launcher = remote_launchers.launcher_of(group, p)
        if hasattr(launcher, "abandon"):
            launcher.abandon()
    with phases.timed(STOP):  # the old engines, where they run (not those already killed)
        site.kill(group, [p for p in group.indices if p not in gone and not _killed(group, p)])
    if shrink is not None:
        group.options = shrink
    with phases.timed(START):
        group.spare_pids.difference_update(spares.values())
        group.view = group.client[list(spares)]
        group.view.block = False
        group.processes = []
        group.remote_launchers = {}
        group.clear_suspect()
        group.group_cut, group.busy_with, group.current_run = False, None, None
    with phases.timed(JOIN):
        startup.join_group(group)
    return True


def _killed(group: Group, p: int) -> bool:
    """Process ``p``'s engine on an ssh host is known gone (jaxnb SIGKILLed it, or it exited)."""
    return ssh.exited(remote_launchers.launcher_of(group, p))


def _give_up_spares(group: Group, targets: set[str]) -> None:
    """Forget the spares on ``targets`` (hosts that do not answer): their launchers stop waiting."""
    launchers = _launchers(group.ipp)
    for pid in list(group.spare_pids):
        launcher = launchers.get(pid)
        if launcher is not None and ssh.place(launcher)[0] in targets:
            group.spare_pids.discard(pid)
            if hasattr(launcher, "abandon"):
                launcher.abandon()


def _location(group: Group, target: str) -> str:
    """The host name of the group's engines on ``target`` (``user@host`` → ``host``)."""
    return next((getattr(remote_launchers.launcher_of(group, p), "location", "")
                 for p in group.indices if _target(group, p) == target), "")


def _wait_starting(group: Group, phases: Stopwatch, need: collections.Counter[str]) -> dict[int, int]:
    """Too few spares ready: wait for those still starting, if enough are (their seconds, and
    why none was ready, under a :data:`refill.NO_SPARE` phase); engine id → pid, or none."""
    launched, registered = _counts(group)
    size = sum(need.values())
    why = refill.of(group).why_none(min(registered, launched), max(0, launched - registered),
                                    len(group.spare_pids) - launched, size, wanted(group))
    start = time.monotonic()
    deadline = start + min(STARTING_WAIT_SECONDS, group.options.init_timeout)
    found: dict[int, int] = {}
    # while enough are launched and some still register (all registered: _ready said no)
    while launched >= size and registered < launched and time.monotonic() < deadline:
        time.sleep(0.02)
        found = _ready(group, need)
        if found:
            break
        launched, registered = _counts(group)
    waited = time.monotonic() - start
    then = f"waited {waited:.2f} s for them" if found else "started new engines"
    phases[f"{refill.NO_SPARE}: {why}; {then}"] = waited if found else 0.0
    return found


def _counts(group: Group) -> tuple[int, int]:
    """(spares launched and still running, engines registered outside the group)."""
    launched = len(_alive(group, group.spare_pids)) if group.spare_pids else 0
    if group.client is None:
        return launched, 0
    members = {info.engine_id for info in group.processes}
    return launched, len([eid for eid in group.client.ids if eid not in members])


def _target(group: Group, p: int) -> str:
    """The ``--hosts`` target of process ``p`` ("" on this machine)."""
    launcher = group.remote_launchers.get(p) or group.launchers.get(group.processes[p].pid)
    return ssh.place(launcher)[0]


def _launchers(ipp_cluster: Any) -> dict[int, Any]:
    """Launched pid → launcher, for every engine ``ipp_cluster`` started (here or on a host)."""
    found = {}
    for launcher in ipp_internals.engine_launchers(ipp_cluster):
        pid = ssh.started_pid(launcher)
        if pid is not None:
            found[pid] = launcher
    return found


def _alive(group: Group, pids: set[int]) -> set[int]:
    """Those of ``pids`` whose engine still runs (as far as their launcher knows)."""
    launchers = _launchers(group.ipp)
    alive = set()
    for pid in pids:
        launcher = launchers.get(pid)
        if launcher is None or ssh.exited(launcher):
            continue
        process = ipp_internals.launcher_process(launcher)
        if process is None or not processes.has_exited(process):
            alive.add(pid)
    return alive
