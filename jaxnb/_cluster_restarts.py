"""``JaxCluster``'s restarts within a run or a resize: on the warm spares, or stop and start
again (a named cluster's supervisor stays), at the same size or another, with the setup
replayed; and ``scale``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from jaxnb._core import group_size, spelling
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.options import ClusterOptions
from jaxnb._core.phases import REPLAY, STOP, Stopwatch
from jaxnb._core.spelling import example, option
from jaxnb._core.state import Group
from jaxnb._hosts import site

if TYPE_CHECKING:
    from jaxnb._train.resize import Sizes

NOT_ELASTIC = (
    "run {name!r} holds the engines and was started without {option}: scale once it ends (or "
    "stop it), or start the run with {example}"
)


Self = TypeVar("Self", bound="Restarting")


class Restarting:
    """The restarts of :class:`jaxnb.JaxCluster` (a base class)."""

    group: Group
    #: Defined by ``JaxCluster`` (and ``Attaching``).
    _halt: Callable[[], None]
    _start: Callable[..., object]
    _replay: Callable[..., float]
    _record: Callable[[], None]

    def _here(self, what: str) -> None:
        """Refuse ``what`` (a restart, scale) on a cluster attached through ``--via``: it needs
        the host's processes (a one-line ``ClusterStateError``)."""
        hold = self.group.attachment
        if hold is not None and hasattr(hold, "refuse"):
            raise hold.refuse(what)

    def _swap_spares(self, phases: Stopwatch | None = None, shrink: ClusterOptions | None = None) -> bool:
        """Restart on the warm spares (only a join); False when none are ready. ``shrink``:
        the options of the smaller group they form (:func:`spares.swap`)."""
        if not self.group.running:
            return False
        from jaxnb._lifecycle import spares

        try:
            swapped = spares.swap(self.group, phases, shrink)
        except Exception:  # a spare failed to join: restart the slow way
            return False
        if swapped:
            self._record()
        return swapped

    def _recover(self, setup: Callable[[], object] | None = None) -> dict[str, float]:
        """Restart with the same options and replay the setup (a training run's recovery);
        the seconds of each phase (:mod:`jaxnb._core.phases`). ``setup``: what replays it
        instead of the recorded setup (the supervisor's, sent by the kernel)."""
        from jaxnb._lifecycle import lost_hosts

        phases = Stopwatch()
        with phases.timed(STOP):
            lost_hosts.wait(self.group)  # hosts found unreachable answer again (or fail)
        if setup is None:
            return self._restart_same(phases=phases)
        self._restart_same(replay=False, phases=phases)
        with phases.timed(REPLAY):
            setup()
        return dict(phases)

    def _restart_same(self, at_least: int | None = None, replay: bool = True,
                      phases: Stopwatch | None = None) -> dict[str, float]:
        """Restart (on the warm spares when ready) and replay the setup; the seconds of each
        phase. ``at_least``: engines that exit during the start are left out down to that many."""
        self._here("a restart (a run's recovery)")
        phases = Stopwatch() if phases is None else phases
        if not self._swap_spares(phases):
            with phases.timed(STOP):
                self._halt()
            self._start(at_least, phases)
        if replay:
            with phases.timed(REPLAY):
                self._replay()
        return dict(phases)

    def _restart_at(self, options: ClusterOptions, lost: Sequence[str] = ()) -> dict[str, float]:
        """Stop, start with ``options`` (the same cluster at another size; ``lost`` names the
        places left out) and replay the setup; the seconds of each phase. A shrink that leaves
        out only unreachable hosts joins the warm spares on the hosts left, when ready
        (:func:`spares.can_shrink`)."""
        from jaxnb._lifecycle import spares

        self._here("scale")
        phases = Stopwatch()
        group = self.group
        whole = group_size.full(group)
        shrink = group.running and spares.can_shrink(group, options)
        group.full_options, group.lost = (None if options == whole else whole), list(lost)
        if not (shrink and self._swap_spares(phases, options)):
            with phases.timed(STOP):
                self._halt()
            group.options = options
            self._start(phases=phases)
        with phases.timed(REPLAY):
            self._replay()
        return dict(phases)
    def _sizes(self) -> Sizes:
        """What this cluster does for a training run that changes size (``min_processes``)."""
        from jaxnb._lifecycle import lost_hosts
        from jaxnb._train.resize import Sizes

        group = self.group

        def still_lost(seconds: float) -> list[str]:
            return site.of(group).wait_answering(group, seconds)

        def not_answering(hosts: list[str], seconds: float) -> list[str]:
            return site.of(group).not_answering(group, hosts, seconds)

        def wait_for(hosts: list[str]) -> None:
            timeout = group_size.full(group).init_timeout
            lost_hosts.check_back(not_answering(hosts, timeout), timeout)

        return Sizes(recover=self._recover, restart_same=self._restart_same, replay=self._replay,
                     restart_at=self._restart_at, lost_hosts=still_lost, not_answering=not_answering,
                     wait_for=wait_for)

    def scale(self: Self, n: int) -> Self:
        """Grow or shrink the group to ``n`` processes (on ``--hosts``: their first ``n`` places).

        With the engines idle: stop, start at that size and replay the setup (as
        ``restart(replay=True)``). During a ``min_processes`` training run: the run goes on at
        that size from its next checkpoint.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"scale takes a number of processes >= 1, got {n!r}; e.g. "
                             f"{spelling.command('scale', 2)}")
        group = self.group
        group.require_running()
        self._here("scale")
        site.check_resizes(group)
        options = group_size.at_size(group, n)
        if group.busy_with:
            if group.resize is None:
                raise ClusterStateError(NOT_ELASTIC.format(
                    name=group.busy_with, option=option("min_processes"),
                    example=example("min_processes", 1)))
            group.resize.request(n, f"{spelling.command('scale', n)} was asked")
            return self
        if options != group.options or n != group.size:
            self._restart_at(options)
        return self
