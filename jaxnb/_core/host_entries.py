"""Host entries (``[user@]host[:count]``) and the addresses hosts reach each other on.

Pure helpers: parsing ``--hosts``/``--hostfile`` and choosing, from the routing
table, the address of this machine's interface that routes to a host. No
hostname is ever resolved to find an address of *this* machine (on Debian and
Ubuntu the hostname maps to 127.0.1.1).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from collections.abc import Callable

from jaxnb._core.spelling import example, option

#: Any port: a UDP ``connect`` only asks the kernel for a route, it sends nothing.
_PROBE_PORT = 9
#: A host name (an ssh-config alias too) or a user name: never an option of ssh, rsync or
#: mpiexec (no leading ``-``), never more than one word of a shell command.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_NAME_RULE = "letters, digits, '.', '-' and '_', not starting with '-' or '.'"


class HostError(ValueError):
    """A wrong host entry or an unreachable address; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class HostEntry:
    """One ``[user@]host[:count]`` entry: ``count`` engines on ``host`` as ``user``."""

    host: str
    user: str | None = None
    count: int = 1
    #: The entry wrote its ``:count`` (``--platform gpu`` then does not count the host's GPUs).
    explicit: bool = dataclasses.field(default=False, compare=False)

    @property
    def target(self) -> str:
        """What ssh is given: ``user@host`` or ``host``."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        if self.count == 1 and not self.explicit:
            return self.target
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"{self.user}@{host}:{self.count}" if self.user else f"{host}:{self.count}"


def parse_entry(text: str) -> HostEntry:
    """``"alice@node1:2"`` → ``HostEntry("node1", "alice", 2)``; IPv6 as ``[::1]:2``."""
    entry = text.strip()
    if not entry:
        raise HostError("an empty host entry; write hosts as [user@]host[:count], e.g. node1:2")
    user = None
    if "@" in entry:
        user, entry = entry.split("@", 1)
        if not user:
            raise HostError(f"host entry {text.strip()!r} has an empty user; e.g. alice@node1")
        if not _NAME.match(user):
            raise HostError(f"the user in host entry {text.strip()!r} is not a user name "
                            f"({_NAME_RULE}); e.g. alice@node1")
    count_text = None
    if entry.startswith("["):  # [ipv6]:count
        close = entry.find("]")
        if close < 0:
            raise HostError(f"host entry {text.strip()!r} lacks its ']'; e.g. [fe80::1]:2")
        host, rest = entry[1:close], entry[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise HostError(
                    f"unexpected {rest!r} in host entry {text.strip()!r}; write [user@]host[:count]"
                )
            count_text = rest[1:]
    elif entry.count(":") == 1:
        host, count_text = entry.split(":")
    else:
        host = entry  # a bare IPv6 address has several colons and no count
    if not is_host(host):
        raise HostError(f"bad host in entry {text.strip()!r}: a host is a name ({_NAME_RULE}) "
                        "or an IP address; write [user@]host[:count], e.g. node1:2")
    count = 1
    if count_text is not None:
        if not count_text.isdigit() or int(count_text) < 1:
            raise HostError(
                f"the count in host entry {text.strip()!r} must be a whole number ≥ 1, e.g. node1:2"
            )
        count = int(count_text)
    return HostEntry(host=host, user=user, count=count, explicit=count_text is not None)


def is_host(host: str) -> bool:
    """Whether ``host`` is a host name (an ssh-config alias too) or an IP address: what may
    reach ssh, rsync or mpiexec as a destination."""
    if _NAME.match(host):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_hosts(text: str) -> tuple[HostEntry, ...]:
    """Comma-separated entries (``--hosts``)."""
    entries = tuple(parse_entry(part) for part in text.split(",") if part.strip())
    if not entries:
        raise HostError("--hosts names no host; e.g. --hosts node1,node2")
    return entries


def parse_hostfile_text(text: str) -> tuple[HostEntry, ...]:
    """One entry per line; blank lines and ``#`` comments are skipped."""
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(parse_entry(line))
    if not entries:
        raise HostError("the hostfile names no host; write one [user@]host[:count] per line")
    return tuple(entries)


def read_hostfile(path: str) -> tuple[HostEntry, ...]:
    """The entries of hostfile ``path``."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise HostError(f"cannot read {example('hostfile', path)}: {exc.strerror}; check the path"
                        ) from None
    return parse_hostfile_text(text)


def engine_counts(entries: tuple[HostEntry, ...]) -> dict[str, int]:
    """ssh target → number of engines (entries naming the same target add up)."""
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.target] = counts.get(entry.target, 0) + entry.count
    return counts


def route_address(host: str) -> str:
    """The address of this machine's interface that routes to ``host`` (routing table only)."""
    try:
        infos = socket.getaddrinfo(host, _PROBE_PORT, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise HostError(
            f"cannot resolve {host} from this machine ({exc}); use its IP address or pass --address"
        ) from None
    last: OSError | None = None
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(sockaddr)  # no packet is sent: only a route lookup
            except OSError as exc:
                last = exc
                continue
            return str(sock.getsockname()[0])
    raise HostError(f"no route from this machine to {host} ({last}); pass --address")


#: A documentation address (TEST-NET-1): routing to it picks the default route's interface.
_ANYWHERE = "192.0.2.1"


def default_address() -> str:
    """The address of the interface with the default route (loopback when there is none)."""
    try:
        return route_address(_ANYWHERE)
    except HostError:
        return "127.0.0.1"


def controller_address(
    entries: tuple[HostEntry, ...], real_host: Callable[[str], str] = str
) -> str:
    """The one address of this machine that every host routes to (the controller listens there).

    ``real_host`` turns a host as named (an ssh-config alias) into what ssh connects to.
    """
    found = {entry.host: route_address(real_host(entry.host)) for entry in entries}
    addresses = set(found.values())
    if len(addresses) > 1:
        which = ", ".join(f"{host} via {addr}" for host, addr in found.items())
        raise HostError(
            f"the hosts are reached through different interfaces ({which}); pass --address with "
            "the one address they all can reach"
        )
    return addresses.pop()


def check_address(address: str) -> str:
    """``--address`` must be an IP address of this machine (not a name, not every interface)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise HostError(f"{example('address', address)} is not an IP address; e.g. "
                        f"{example('address', '10.0.0.5')}") from None
    if ip.is_unspecified:
        raise HostError(f"{option('address')} must name one interface, not every interface; e.g. "
                        f"{example('address', '10.0.0.5')}")
    return str(ip)
