"""The same cluster at another size: the options of a group with fewer or more processes (pure).

``JaxCluster.scale(n)`` and a ``--min-processes`` run (which goes on with the processes left
after a loss, and grows back) restart the group at such options. The options the cluster was
started with stay in ``group.full_options`` (the size it grows back to); the places left out
are named in ``group.lost`` (``%jax_cluster status`` shows them). On ``--hosts``, a group of
``n`` takes the first ``n`` places of the hosts, in their order; on this machine, ``n``
processes. Batch launchers (mpi, Slurm) have the size their job was given: they do not scale.
"""

from __future__ import annotations

import dataclasses

from jaxnb._core.host_entries import HostEntry
from jaxnb._core.messages import plural
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group

TOO_MANY = "{hosts} {have} {places}; scale to at most {most}, or start with more --hosts"


def full(group: Group) -> ClusterOptions:
    """The options the cluster was started with (its own size)."""
    return group.full_options or group.options


def at_size(group: Group, size: int) -> ClusterOptions:
    """The cluster's options for ``size`` processes (``--hosts``: their first ``size`` places)."""
    options = full(group)
    if not options.hosts:
        return dataclasses.replace(options, n=size)
    entries = options.host_entries()
    most = sum(e.count for e in entries)
    if size > most:
        raise ValueError(TOO_MANY.format(
            hosts=", ".join(options.hosts), have="has" if len(entries) == 1 else "have",
            places=plural(most, "place"), most=most))
    taken: list[HostEntry] = []
    for entry in entries:
        count = min(entry.count, size - sum(e.count for e in taken))
        if count > 0:
            taken.append(dataclasses.replace(entry, count=count,
                                             explicit=entry.explicit or count != entry.count))
    return _with_hosts(options, taken)


def without(group: Group, targets: list[str]) -> ClusterOptions:
    """The group's options without the hosts ``targets`` (ssh targets, ``[user@]host``)."""
    kept = [e for e in group.options.host_entries() if e.target not in targets]
    return _with_hosts(group.options, kept)


def with_size(group: Group, size: int) -> ClusterOptions:
    """The group's options once it came up with ``size`` processes (a start that left some
    out): the same, with ``n`` set to what started."""
    return dataclasses.replace(group.options, n=size)


def size(options: ClusterOptions) -> int:
    """How many processes a group started with ``options`` has."""
    return options.resolved_n()


def lost_hosts(group: Group, options: ClusterOptions) -> list[str]:
    """The ssh targets of the cluster's hosts that ``options`` leaves out."""
    kept = {e.target for e in options.host_entries()}
    return [e.target for e in full(group).host_entries() if e.target not in kept]


def _with_hosts(options: ClusterOptions, entries: list[HostEntry]) -> ClusterOptions:
    count = sum(e.count for e in entries)
    return dataclasses.replace(options, hosts=tuple(str(e) for e in entries),
                               n=None if options.n is None else count)
