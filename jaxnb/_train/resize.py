"""``min_processes=K`` (``--min-processes K``): a run that goes on with fewer processes and grows back.

With ``max_failures``, a lost process or host is waited for (``--init-timeout``) and the run
ends if it does not come back. With ``min_processes`` the wait is short (:data:`GRACE_SECONDS`):
hosts that still do not answer are left out, and the group restarts on the places left (at
least K), the setup replayed (so the user's mesh is built from the new ``jax.device_count()``)
and the function resumed from the latest checkpoint, laid out for the new mesh; on this
machine, a restart whose engines cannot all start (a lost slot) goes on with those that did.
The datasets re-split what is left of the epoch over the processes left (the global batch
stays; :mod:`jaxnb._engine.datasets.shard`) and the checkpoint's per-process leaves follow
:mod:`jaxnb._engine.checkpoint.store`'s rule.

It grows back when a lost host answers again (probed every :data:`PROBE_SECONDS`) or on
``scale(N)``: the processes agree at their next checkpoint to end the attempt
(:mod:`jaxnb._engine.run.resizing`), and the group restarts at the new size the same way.
Each change is a record in ``Result.failures`` with ``old_size`` and ``new_size`` (a grow, not
a failure, is not counted against ``max_failures``). Where the smaller group cannot work —
fewer than K processes, a mesh whose model-parallel axes the new device count does not divide,
a config that fixes the process count, a setup that fails at the new size — jaxnb says why in
one line and waits for the full size, as without ``min_processes``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxnb._core import group_size
from jaxnb._core.contract import RESIZE_SIGNAL
from jaxnb._core.heartbeat import SILENCE_SECONDS
from jaxnb._core.messages import first_line, plural
from jaxnb._core.options import ClusterOptions
from jaxnb._core.phases import GRACE, REPLAY, Stopwatch, add
from jaxnb._core.replay import ReplayError
from jaxnb._core.spelling import command, example, option
from jaxnb._core.state import Group
from jaxnb._failures import free
from jaxnb._train.result import Failure

#: With ``min_processes``, how long hosts found unreachable may stay silent before they are
#: left out (at most ``--init-timeout``), counted from their engines' last heartbeat: the
#: controller drops an engine after :data:`~jaxnb._core.heartbeat.SILENCE_SECONDS`, and what
#: is left of the grace then is spent probing over fresh ssh connections. A link that blinks
#: longer costs a shrink, then a grow at the checkpoint after it answers again (the run goes on
#: meanwhile).
GRACE_SECONDS = 2.0
#: The least of the grace worth a probe: a fresh ssh connection gets a second (less left: the
#: hosts are left out at once).
PROBE_LEAST_SECONDS = 1.0
#: How often hosts left out are probed (a fresh ssh connection) while the run goes on without them.
PROBE_SECONDS = 2.0
#: How long one probe may take (a fresh ssh connection takes seconds on a loaded machine; it
#: ends as soon as the host answered).
PROBE_ANSWER_SECONDS = 10.0
#: Mesh axes that carry the data (they absorb a change of the device count); the others are
#: model-parallel and keep their size. A mesh with no such name has its first axis as data.
DATA_AXES = ("data", "batch", "dp", "fsdp", "replica", "replicas")
#: Config keys that fix the number of processes in the function.
FIXED_COUNT_KEYS = ("num_processes", "process_count", "world_size", "n_processes", "num_hosts")

CANNOT = "jaxnb: run {name!r} cannot go on with {n}: {why}; {then}, as without {option}"
WENT_ON = "jaxnb: run {name!r} goes on with {n} of {full} processes ({why}); it grows back {when}"
GREW = "jaxnb: run {name!r} goes on with {n} processes from step {step} ({why})"
NOT_GROWN = "jaxnb: run {name!r} cannot change to {n} processes ({why}); it goes on with {had}"


@dataclasses.dataclass
class Sizes:
    """What the cluster does for a run that changes size (``JaxCluster``'s own jobs)."""

    #: Wait for lost hosts (``--init-timeout``), restart, replay: a recovery without resizing.
    recover: Callable[[], dict[str, float]]
    #: Restart with the group's options (engines that cannot start left out down to
    #: ``at_least``), and replay the setup unless told not to.
    restart_same: Callable[[int | None, bool], dict[str, float]]
    #: Replay the setup; the seconds it took.
    replay: Callable[[], float]
    #: Stop, start with other options (the places left out named), replay.
    restart_at: Callable[[ClusterOptions, Sequence[str]], dict[str, float]]
    #: The hosts found unreachable that still do not answer after at most that many seconds.
    lost_hosts: Callable[[float], list[str]]
    #: Those of the hosts that do not answer a fresh connection within that many seconds.
    not_answering: Callable[[list[str], float], list[str]]
    #: Wait (``--init-timeout``) until these hosts answer; a ``StartError`` naming those that did not.
    wait_for: Callable[[list[str]], None]


def check_min_processes(min_processes: int | None, max_failures: int, group: Group) -> None:
    """``min_processes`` is None or a whole number from 1 to the group's size minus one, given
    with ``max_failures`` (a one-line error otherwise)."""
    if min_processes is None:
        return
    if isinstance(min_processes, bool) or not isinstance(min_processes, int) or min_processes < 1:
        raise ValueError(f"{option('min_processes')} takes a whole number >= 1, got "
                         f"{min_processes!r}; e.g. {example('min_processes', 1)}")
    if max_failures == 0:  # -1: no limit
        raise ValueError(f"{option('min_processes')} goes on after a loss, which needs "
                         f"{option('max_failures')}: add e.g. {example('max_failures', 2)}")
    if min_processes >= group.size:
        raise ValueError(f"{example('min_processes', min_processes)} leaves no fewer processes to "
                         f"go on with on {plural(group.size, 'process', 'processes')}; pass at most "
                         f"{group.size - 1}")


class Resize:
    """The size changes of one run: going on with fewer after a loss, growing back."""

    def __init__(self, group: Group, min_processes: int, sizes: Sizes, name: str, config: Any) -> None:
        self.group, self.min, self.sizes, self.name, self.config = group, min_processes, sizes, name, config
        self.full = group_size.size(group_size.full(group))
        #: Process 0's meshes when the run was prepared: name -> [[axis, size], ...].
        self.meshes: dict[str, list[list[Any]]] = {}
        #: The size asked for at the next checkpoint, and why.
        self.wanted: tuple[int, str] | None = None
        self.monitor: Any = None
        self._lock = threading.Lock()
        self._watching = False
        self.ended = False

    # ---- after a loss ---------------------------------------------------------------------

    def recover(self, failure: Failure) -> dict[str, float]:
        """Restart after ``failure``: on the places left when some are lost, else as before."""
        group, before = self.group, self.group.size
        grace = min(GRACE_SECONDS, group.options.init_timeout)
        silent = SILENCE_SECONDS + max(0.0, time.time() - failure.time)  # failure.time: the death seen
        waited = Stopwatch()
        if group.options.hosts:
            with waited.timed(GRACE):
                left = grace - silent
                lost = self.sizes.lost_hosts(left if left >= PROBE_LEAST_SECONDS else 0.0)
        else:
            lost = []
        seconds = self._without(lost, failure, grace) if lost else self._same(before)
        add(seconds, waited)
        if group.size != before:
            failure.old_size, failure.new_size = before, group.size
            when = ("at a checkpoint once it answers again" if lost else
                    "with " + command("scale", self.full).strip("`"))
            print(WENT_ON.format(name=self.name, n=group.size, full=self.full, when=when,
                                 why="; ".join(group.lost)), file=sys.stderr)
        self._watch()
        return seconds

    def _same(self, before: int) -> dict[str, float]:
        """Restart every process; those that cannot start are left out (a lost slot here)."""
        seconds = self.sizes.restart_same(self.min, False)
        n, then = self.group.size, f"restarting all {before}"
        if n < before and self._refused(n, then):
            return self.sizes.restart_at(group_size.full(self.group), ())
        try:
            seconds[REPLAY] = self.sizes.replay()
        except Exception as exc:
            if n == before:
                raise
            self._say(n, f"the setup failed at that size: {first_line(exc)}", then)
            return self.sizes.restart_at(group_size.full(self.group), ())
        return seconds

    def _without(self, lost: list[str], failure: Failure, grace: float) -> dict[str, float]:
        options = group_size.without(self.group, lost)
        n = group_size.size(options)
        then = f"waiting for {', '.join(lost)}"
        if self._refused(n, then):
            return self.sizes.recover()
        step = "" if failure.step is None else f" since step {failure.step}"
        places = [f"{host}: did not answer within {grace:g} s{step}" for host in lost]
        try:
            return self.sizes.restart_at(options, places)
        except Exception as exc:  # the setup failed at this size (a mesh...), or the start
            what = "the setup" if isinstance(exc, ReplayError) else "the start"
            self._say(n, f"{what} failed at that size: {first_line(exc)}", then)
            self.sizes.wait_for(lost)
            return self.sizes.restart_at(group_size.full(self.group), ())

    def _refused(self, n: int, then: str) -> bool:
        """Say why ``n`` processes cannot go on, if they cannot."""
        why = self.refusal(n)
        if why:
            self._say(n, why, then)
        return bool(why)

    def _say(self, n: int, why: str, then: str) -> None:
        print(CANNOT.format(name=self.name, n=plural(n, "process", "processes"), why=why, then=then,
                            option=option("min_processes")), file=sys.stderr)

    def refusal(self, n: int) -> str | None:
        """Why ``n`` processes cannot run this function, or ``None``."""
        if n < self.min:
            return f"that is fewer than {example('min_processes', self.min)}"
        per_process = len(self.group.processes[0].local_devices) if self.group.processes else 1
        for name, axes in self.meshes.items():
            why = mesh_refusal(name, axes, n * max(per_process, 1))
            if why:
                return why
        return None if n == self.full else config_refusal(self.config, self.full)

    # ---- growing back -----------------------------------------------------------------------

    def request(self, n: int, why: str) -> None:
        """Go on with ``n`` processes from the run's next checkpoint (a one-line ``ValueError``
        when ``n`` processes cannot run the function)."""
        refused = self.refusal(n)
        if refused:
            raise ValueError(f"run {self.name!r} cannot go on with "
                             f"{plural(n, 'process', 'processes')}: {refused}")
        with self._lock:
            self.wanted = (n, why)
        self.signal()

    def follow(self, monitor: Any) -> None:
        """An attempt started: ``scale`` asks this run now; a change asked meanwhile is sent."""
        self.monitor, self.group.resize = monitor, self
        self.signal()

    def signal(self) -> None:
        """Tell the running attempt's processes that a size change waits for the next checkpoint."""
        monitor = self.monitor
        if self.wanted is None or monitor is None or monitor.ar.ready():
            return
        try:
            free.signal_processes(self.group, self.group.indices, RESIZE_SIGNAL)
        except Exception as exc:  # tried again at the next attempt
            print(f"jaxnb: could not ask the processes to resize: {exc}", file=sys.stderr)

    def ended_at(self, monitor: Any) -> int | None:
        """The checkpoint step at which every process ended the attempt to resize, or None."""
        if self.wanted is None or monitor.gave_up is not None or not monitor.ar.ready():
            return None
        ends = [f.result() for f in monitor.futures.values()]
        steps = {e.get("resized_at") for e in ends if isinstance(e, dict)}
        return steps.pop() if len(steps) == 1 and None not in steps and len(ends) == len(monitor.futures) \
            else None

    def grow(self, step: int) -> Failure:
        """Restart at the size asked (the attempt ended at checkpoint ``step``); its record."""
        with self._lock:
            assert self.wanted is not None
            (n, why), self.wanted = self.wanted, None
        group, before, options = self.group, self.group.size, self.group.options
        had, record = list(group.lost), Failure(time=time.time(), step=step, processes=(), cause=why,
                                                resumed_from=step, old_size=before)
        target = group_size.at_size(group, n)
        refused = self.refusal(n)
        try:
            if refused:
                raise ValueError(refused)
            still = [f"{h}: {self._lost_line(h, had)}" for h in group_size.lost_hosts(group, target)]
            record.phases.update(self.sizes.restart_at(target, still))
        except Exception as exc:
            print(NOT_GROWN.format(name=self.name, n=n, why=first_line(exc), had=before), file=sys.stderr)
            record.phases.update(self.sizes.restart_at(options, had))
        record.new_size = group.size
        if group.size != before:
            print(GREW.format(name=self.name, n=group.size, step=step, why=why), file=sys.stderr)
        self._watch()
        return record

    @staticmethod
    def _lost_line(host: str, had: list[str]) -> str:
        return next((line.split(": ", 1)[1] for line in had if line.startswith(f"{host}: ")),
                    "left out")

    def _watch(self) -> None:
        """While hosts are left out: probe them; when one answers, grow back to the full size."""
        hosts = group_size.lost_hosts(self.group, self.group.options) if self.group.options.hosts else []
        if not hosts or self._watching:
            return
        self._watching = True
        threading.Thread(target=self._probe, args=(hosts,), name="jaxnb-lost-hosts", daemon=True).start()

    def _probe(self, hosts: list[str]) -> None:
        try:
            while not self.ended:
                back = [h for h in hosts if h not in self.sizes.not_answering([h], PROBE_ANSWER_SECONDS)]
                if back and not self.ended:
                    self.request(self.full, f"{', '.join(back)} answers again")
                    return
                time.sleep(PROBE_SECONDS)
        except Exception as exc:  # the run goes on at its size; say why it will not grow
            print(f"jaxnb: stopped probing {', '.join(hosts)}: {exc}", file=sys.stderr)
        finally:
            self._watching = False

    def end(self) -> None:
        """The run is over: stop probing; ``scale`` acts on the idle cluster again."""
        self.ended = True
        if self.group.resize is self:
            self.group.resize = None


def mesh_refusal(name: str, axes: list[list[Any]], devices: int) -> str | None:
    """Why mesh ``name`` (its ``[axis, size]`` pairs) cannot be built on ``devices``, or None:
    its model-parallel axes (all but the data axis) keep their sizes, and must divide it."""
    if len(axes) < 2:
        return None
    data = next((i for i, (axis, _) in enumerate(axes) if str(axis).lower() in DATA_AXES), 0)
    model = [(axis, int(size)) for i, (axis, size) in enumerate(axes) if i != data]
    if devices % math.prod(size for _, size in model) == 0:
        return None
    said = ", ".join(f"{axis}={size}" for axis, size in model)
    return (f"mesh `{name}` keeps its model-parallel {'axis' if len(model) == 1 else 'axes'} "
            f"{said}, which {plural(devices, 'device')} do not divide")


def config_refusal(config: Any, size: int) -> str | None:
    """Why ``config`` fixes the number of processes at ``size``, or None."""
    if not isinstance(config, Mapping):
        return None
    for key in FIXED_COUNT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value == size:
            return (f"its config fixes {key}={value} (read jaxnb.get_context().get_world_size() "
                    "in the function instead)")
    return None
