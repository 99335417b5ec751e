"""``jaxnb.show_mesh`` and ``jaxnb.show_sharding`` (in cells, on the engines), and
``%jax_mesh NAME`` (in the notebook): describe on the engine, then display."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxnb._core.contract import EngineCall
from jaxnb._core.state import Group

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

_DESCRIBE_NAMED = EngineCall("jaxnb._engine.layout.describe:describe_named")

__all__ = ["show_mesh", "show_remote", "show_sharding"]


def show_mesh(mesh: Mesh, name: str | None = None) -> None:
    """Display ``mesh``: its device grid, axis names and sizes, coloured by process."""
    from jaxnb._engine.layout.describe import describe_mesh
    from jaxnb._widgets.mesh_view import show

    desc = describe_mesh(mesh)
    if name:
        desc["name"] = name
    show(desc)


def show_sharding(array: jax.Array, name: str | None = None) -> None:
    """Display which block of ``array`` each device holds (no data is gathered)."""
    from jaxnb._engine.layout.describe import describe_array
    from jaxnb._widgets.mesh_view import show

    desc = describe_array(array)
    if name:
        desc["name"] = name
    show(desc)


def show_remote(group: Group, name: str) -> None:
    """``%jax_mesh NAME``: describe NAME on process 0, fill in hosts, and display it."""
    import ipyparallel as ipp

    from jaxnb._widgets.mesh_view import show

    try:
        desc = group.engine(0).apply_sync(_DESCRIBE_NAMED, name)
    except ipp.error.RemoteError as exc:
        if exc.ename in ("NameError", "TypeError"):
            raise {"NameError": NameError, "TypeError": TypeError}[exc.ename](exc.evalue) from None
        raise
    hosts = {p.process_index: p.host for p in group.processes}
    for entry in desc.get("processes", []):
        entry["host"] = entry.get("host") or hosts.get(entry["index"])
    for cell in _cells(desc.get("devices")):
        if isinstance(cell, dict) and "process_index" in cell and "host" in cell:
            cell["host"] = cell["host"] or hosts.get(cell["process_index"])
    show(desc)


def _cells(grid: object) -> list:
    if isinstance(grid, list):
        return [c for item in grid for c in _cells(item)]
    return [grid]
