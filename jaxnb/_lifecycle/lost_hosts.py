"""Before a recovery restarts the group: hosts found unreachable get ``--init-timeout`` to answer.

A host whose link went down for a few seconds is back before long; restarting at once
would fail its ssh check (and could not SIGKILL its old engine). So the restart first
waits, over fresh ssh connections, until every host found unreachable answers again;
one that does not within ``--init-timeout`` ends the recovery, named.
"""

from __future__ import annotations

from jaxnb._core.errors import StartError
from jaxnb._core.state import Group
from jaxnb._hosts import site

HOSTS_NOT_BACK = (
    "{hosts} did not answer again within --init-timeout {timeout:g} s; bring it back (or leave "
    "it out of --hosts), then run `%jax_cluster restart` and `%jax_train --resume`"
)


def wait(group: Group) -> None:
    """Return once every host found unreachable answers (at once when none was); else raise
    :class:`StartError` naming the hosts that did not answer within ``init_timeout``."""
    timeout = group.options.init_timeout
    check_back(site.of(group).wait_answering(group, timeout), timeout)


def check_back(lost: list[str], timeout: float) -> None:
    """A :class:`StartError` naming the hosts ``lost`` that did not answer within ``timeout``."""
    if lost:
        raise StartError(HOSTS_NOT_BACK.format(hosts=", ".join(lost), timeout=timeout))
