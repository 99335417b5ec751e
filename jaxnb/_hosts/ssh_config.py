"""Hosts as users name them in ``~/.ssh/config``: an alias resolved with ``ssh -G``.

``--hosts gpu1`` where ``~/.ssh/config`` has ``Host gpu1`` with ``HostName``,
``User`` and ``Port``: ssh itself connects to the alias, but jaxnb must know
the real host to pick this machine's address that routes to it. ``ssh -G``
prints the configuration ssh would use (after every ``Host``/``Match`` block)
without connecting.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

#: ``ssh -G`` reads files only; it never takes long.
TIMEOUT_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class SshHost:
    """Where ssh really goes for a name: host name (or address), user and port."""

    hostname: str
    user: str | None
    port: int


def parse_dump(text: str, host: str) -> SshHost:
    """The ``hostname``, ``user`` and ``port`` lines of ``ssh -G host``'s output."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key.lower() in ("hostname", "user", "port") and key.lower() not in found:
            found[key.lower()] = value.strip()
    port = found.get("port", "22")
    return SshHost(
        hostname=found.get("hostname") or host,
        user=found.get("user") or None,
        port=int(port) if port.isdigit() else 22,
    )


def resolve(host: str, config: str | None = None) -> SshHost:
    """What ssh makes of ``host`` (an alias, a name or an address); ``host`` itself when
    ``ssh -G`` is not available."""
    from jaxnb._hosts.ssh_connections import (
        SSH_CONFIG_VARIABLE,  # the config jaxnb's own ssh commands use (-F)
    )

    config = config if config is not None else os.environ.get(SSH_CONFIG_VARIABLE)
    cmd = ["ssh", *(["-F", config] if config else []), "-G", "--", host]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return SshHost(host, None, 22)
    if out.returncode != 0:
        return SshHost(host, None, 22)
    return parse_dump(out.stdout, host)


def real_hostname(host: str) -> str:
    """The host name or address ssh connects to for ``host``."""
    return resolve(host).hostname
