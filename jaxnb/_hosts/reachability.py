"""Hosts found unreachable over ssh, remembered for a while: their logs are not fetched (each
try would wait out ssh's timeout), and a restart first waits until they answer again."""

from __future__ import annotations

import time

from jaxnb._core.state import Group
from jaxnb._hosts import remote_launchers, ssh_connections

#: How long a host found unreachable is remembered as such.
UNREACHABLE_MEMORY_SECONDS = 30.0
#: ssh targets found unreachable recently (target → when).
_unreachable: dict[str, float] = {}


def mark_unreachable(host: str) -> None:
    """``host`` did not answer a fresh ssh connection just now."""
    _unreachable[host] = time.monotonic()


def answered(host: str) -> None:
    """``host`` answered: it is no longer remembered as unreachable."""
    _unreachable.pop(host, None)


def unreachable_now(host: str) -> bool:
    """Whether ``host`` was found unreachable within the last ``UNREACHABLE_MEMORY_SECONDS``."""
    seen = _unreachable.get(host)
    return seen is not None and time.monotonic() - seen < UNREACHABLE_MEMORY_SECONDS


def wait_answering(group: Group, timeout: float) -> list[str]:
    """Wait (at most ``timeout`` s) until the hosts found unreachable answer ssh again; those
    that did not (nothing to wait for when none was found unreachable)."""
    mine = {getattr(launcher, "location", "") for launcher in group.remote_launchers.values()}
    lost = [host for host in list(_unreachable) if host in mine and unreachable_now(host)]
    return not_answering(group, lost, timeout)


def not_answering(group: Group, hosts: list[str], timeout: float) -> list[str]:
    """Try ``hosts`` over fresh ssh connections for at most ``timeout`` s; those that did not answer."""
    still = ssh_connections.wait_answering(hosts, remote_launchers.control_dir(group.ipp), timeout)
    for host in set(hosts) - set(still):
        answered(host)
    return still
