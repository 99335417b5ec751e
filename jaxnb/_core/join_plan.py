"""How the processes join one ``jax.distributed`` group: each one's rank and placement, given
the coordinator (whose address the site picks: :meth:`jaxnb._hosts.site.Site.coordinator_address`).

Used when a cluster starts and when a broken group is re-joined in place.
"""

from __future__ import annotations

from jaxnb._core.contract import JoinParams
from jaxnb._core.options import ClusterOptions


def join_params(options: ClusterOptions, coordinator: str, hosts: list[str]) -> list[JoinParams]:
    """How each process joins the group, given the host each one runs on (start and repair)."""
    bind = coordinator  # process 0's own address, never every interface
    found = []
    for index, placement in enumerate(placements(hosts)):
        # One engine per GPU: the engine's local rank picks its GPU on its own host.
        local_ids = (placement[0],) if options.platform == "gpu" else None
        found.append(
            JoinParams(
                process_id=index,
                num_processes=len(hosts),
                coordinator=coordinator,
                bind_address=bind,
                heartbeat_timeout=options.heartbeat_timeout,
                init_timeout=int(options.init_timeout),
                init=options.init,
                local_device_ids=local_ids,
                placement=placement,
            )
        )
    return found


def placements(hosts: list[str]) -> list[tuple[int, int, int]]:
    """(local rank, local world size, node rank) of each process, given its host."""
    order = list(dict.fromkeys(hosts))
    seen: dict[str, int] = {}
    result = []
    for host in hosts:
        result.append((seen.get(host, 0), hosts.count(host), order.index(host)))
        seen[host] = seen.get(host, 0) + 1
    return result

