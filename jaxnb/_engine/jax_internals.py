"""Every use of JAX's private modules (``jax._src``), in one place (written against jax 0.10).

jaxnb needs a few things JAX does not make public: the state of
``jax.distributed`` (is this process in a group, its coordination client for
the key-value store), whether backends exist yet, and the mesh context that
an interrupted ``jax.set_mesh`` can leave behind. If a JAX release moves one
of them, this is the module to change.
"""

from __future__ import annotations

from typing import Any

#: The JAX version these reads were written against.
WRITTEN_FOR = "0.10"


def distributed_state() -> Any:
    """JAX's ``jax.distributed`` state (``client``, ``coordinator_address``, ``process_id``, …)."""
    from jax._src import distributed

    return distributed.global_state


def distributed_client() -> Any | None:
    """The coordination-service client of this process's group, or ``None`` outside a group."""
    try:
        return distributed_state().client
    except ImportError:
        return None


def backends_created() -> bool:
    """True once JAX has created its backends in this process."""
    from jax._src import xla_bridge

    return bool(getattr(xla_bridge, "_backends", None))


def forget_meshes() -> None:
    """Drop meshes left in context (e.g. by a ``jax.set_mesh`` an interrupt cut short)."""
    import jax
    from jax._src import mesh as mesh_lib

    jax.set_mesh(None)
    mesh_lib.thread_resources.stack = [mesh_lib.EMPTY_ENV]
    mesh_lib.thread_resources.env = mesh_lib.EMPTY_ENV
