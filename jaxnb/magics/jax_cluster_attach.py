"""``%jax_cluster attach [NAME]``, ``detach`` and ``list``: a named cluster outlives the kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from jaxnb._attach import listing
from jaxnb._core.cluster_names import DEFAULT_NAME
from jaxnb.magics import kit

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster


def run(front: kit.Front, command: str, name: str | None,
        show_status: Callable[[JaxCluster, bool], None], via: str | None = None,
        python: str | None = None) -> None:
    """Do ``command`` (``attach``, ``detach`` or ``list``) for the magics' session (``via``:
    attach the cluster on that host, over ssh; ``python``: the interpreter there)."""
    if command == "list":
        from jaxnb._cluster_attach import clusters

        with kit.api_call():
            found = clusters(via, python=python)
        print(listing.table(found, via or "this machine"))
    elif command == "detach":
        cluster = front.require()
        host = cluster.group.via_host
        with kit.api_call():
            cluster.detach()
        front.cluster = None
        again = f"{cluster.options.name} --via {host}" if host else cluster.options.name
        print(f"jaxnb: cluster {cluster.options.name!r} left running with no kernel attached; "
              f"`%jax_cluster attach {again}` takes it back")
    else:
        show_status(_attach(front, name or DEFAULT_NAME, via, python), False)  # no round trip


def _attach(front: kit.Front, name: str, via: str | None, python: str | None) -> JaxCluster:
    held = front.cluster
    if held is not None and held.running and held.options.name != name:
        raise UsageError("a cluster is running in this kernel; `%jax_cluster detach` (a named "
                         "one) or `%jax_cluster stop` it first")
    from jaxnb._cluster import JaxCluster

    with kit.api_call():
        cluster = JaxCluster.attach(name, via=via, python=python)
    if held is not None and held is not cluster:
        held.group.let_go()  # the same cluster, held again: only the new hold counts
    front.cluster = cluster
    return cluster
