"""The options of a cluster as this machine starts it: hosts from a hostfile, a TPU VM slice's
workers, and a one-line ``OptionError`` for a platform this machine does not have.

The options themselves are declared and checked once, in :class:`jaxnb._core.options.ClusterOptions`.
"""

from __future__ import annotations

import dataclasses

from jaxnb._core.host_entries import HostError, read_hostfile
from jaxnb._core.options import ClusterOptions, OptionError


def resolve(options: ClusterOptions) -> ClusterOptions:
    """``options`` with the hostfile's hosts after ``hosts`` and a TPU slice's workers found;
    ``OptionError``: one line saying what to pass."""
    hosts = options.hosts
    if options.hostfile is not None:  # one [user@]host[:count] per line, after any hosts
        try:
            hosts = (*hosts, *(str(e) for e in read_hostfile(options.hostfile)))
        except HostError as exc:
            raise OptionError(str(exc)) from None
    local_host = None
    if options.platform == "tpu" and not hosts and options.engines == "local":
        hosts, local_host = _tpu_workers()  # a TPU VM slice: one engine per worker
    resolved = dataclasses.replace(options, hosts=hosts, hostfile=None, local_host=local_host)
    if resolved.is_local and resolved.platform != "cpu":
        from jaxnb._core.options import local_gpu_count
        from jaxnb._hosts.platforms import check_local

        gpus = local_gpu_count() if resolved.platform == "gpu" else None
        problem = check_local(resolved.platform, gpus)
        if problem:
            raise OptionError(problem)
    return resolved


def _tpu_workers() -> tuple[tuple[str, ...], str | None]:
    """On a TPU VM slice: its workers (in worker order) and this worker; else none."""
    from jaxnb._hosts.tpu import SliceError, discover

    try:
        found = discover()
    except SliceError as exc:
        raise OptionError(str(exc)) from None
    if found is None:
        return (), None
    return tuple(found.workers), found.workers[found.this]
