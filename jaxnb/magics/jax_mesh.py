"""``%jax_mesh NAME``: describe the mesh, array or pytree NAME on process 0, fill in the hosts,
and draw it in the notebook (``jaxnb.show_mesh``/``show_sharding`` do it from a cell)."""

from __future__ import annotations

from IPython.core.error import UsageError

from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import as_local
from jaxnb._core.state import Group
from jaxnb.magics import kit

_DESCRIBE_NAMED = EngineCall("jaxnb._engine.layout.describe:describe_named")


def run(front: kit.Front, line: str) -> None:
    """``%jax_mesh NAME``: draw the mesh, the sharding of the global array, or the leaves
    (shape, dtype, spec, bytes per device) of the pytree NAME; NAME may be an
    expression, e.g. ``%jax_mesh params['w1']``."""
    name = line.strip()
    flags = [t for t in name.split() if t.startswith("--") or (t[:1] == "-" and t[1:2].isalpha())]
    if flags:
        raise UsageError(f"%jax_mesh takes no flags (got {' '.join(flags)}); e.g. %jax_mesh mesh")
    if not name:
        raise UsageError("%jax_mesh takes one NAME or expression; e.g. %jax_mesh mesh")
    if not name.isidentifier():
        try:
            compile(name, "<%jax_mesh>", "eval")
        except SyntaxError:
            raise UsageError(
                f"%jax_mesh: {name!r} is neither a Python name nor an expression; "
                "e.g. %jax_mesh params['w1']"
            ) from None
    cluster = front.require()
    with kit.api_call(NameError, TypeError):
        show_remote(cluster.group, name)


def show_remote(group: Group, name: str) -> None:
    """Describe NAME on process 0, fill in hosts, and display it."""
    import ipyparallel as ipp

    from jaxnb._widgets.mesh_view import show

    try:
        desc = group.engine(0).apply_sync(_DESCRIBE_NAMED, name)
    except ipp.error.RemoteError as exc:
        local = as_local(exc)
        if local is not None:
            raise local from None
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
