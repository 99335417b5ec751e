"""How the processes join one ``jax.distributed`` group: each one's rank, placement and the coordinator.

Used when a cluster starts and when a broken group is re-joined in place.
"""

from __future__ import annotations

import socket

from jaxnb._core.contract import EngineCall, JoinParams
from jaxnb._core.options import ClusterOptions
from jaxnb._core.state import Group

_HOST_ADDRESS = EngineCall("jaxnb._engine.group.process:host_address")
_FREE_PORT = EngineCall("jaxnb._engine.group.process:free_port")


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


def coordinator_address(group: Group, first_engine: int) -> str:
    """``host:port`` for the coordination service, on process 0's host."""
    if group.options.is_local:  # the notebook's host is process 0's host
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{sock.getsockname()[1]}"
    engine = group.client[first_engine]
    host0 = engine.apply_sync(_HOST_ADDRESS)
    port = engine.apply_sync(_FREE_PORT, host0)
    return f"{host0}:{port}"
