"""``jaxnb.show_mesh`` and ``jaxnb.show_sharding``: called in cells, on the engines, they describe
a mesh or an array's sharding there and display it. Light to import (every engine imports
``jaxnb``): JAX and the widget load on the first call. ``%jax_mesh`` is in ``jaxnb.magics.jax_mesh``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

__all__ = ["show_mesh", "show_sharding"]


def show_mesh(mesh: Mesh, name: str | None = None) -> None:
    """Display ``mesh``: its device grid, axis names and sizes, coloured by process.

    Args:
        mesh: a ``jax.sharding.Mesh``.
        name: the title shown above it (default: none).
    """
    from jaxnb._engine.layout.describe import describe_mesh
    from jaxnb._widgets.mesh_view import show

    desc = describe_mesh(mesh)
    if name:
        desc["name"] = name
    show(desc)


def show_sharding(array: jax.Array, name: str | None = None) -> None:
    """Display which block of ``array`` each device holds (no data is gathered).

    Args:
        array: a ``jax.Array`` (a global array spans every process's devices).
        name: the title shown above it (default: none).
    """
    from jaxnb._engine.layout.describe import describe_array
    from jaxnb._widgets.mesh_view import show

    desc = describe_array(array)
    if name:
        desc["name"] = name
    show(desc)
