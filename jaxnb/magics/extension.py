"""``%load_ext jaxnb``: :class:`JaxnbMagics` registers every magic, each a line that hands the
line to its module; the session's cluster lives on the instance (scripts reach it with
:func:`current_cluster`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, needs_local_scope

from jaxnb._core.messages import NOT_STARTED
from jaxnb.magics import (
    jax_cluster,
    jax_debug,
    jax_mesh,
    jax_profile,
    jax_pull_push,
    jax_train,
    jax_tune,
    jax_who_diff,
)

if TYPE_CHECKING:  # loaded by the magic that needs it: `%load_ext jaxnb` stays light
    from jaxnb._cluster import JaxCluster


@magics_class
class JaxnbMagics(Magics):
    """``%jax_cluster``, ``%%jax_cluster``, ``%jax_train``, ``%jax_tune``, ``%%jax_profile``,
    ``%jax_mesh``, ``%jax_pull``, ``%jax_push``, ``%jax_debug``, ``%jax_who``, ``%jax_diff``."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        #: The cluster these magics drive (``None`` until ``%jax_cluster start``).
        self.cluster: JaxCluster | None = None

    def require(self) -> JaxCluster:
        """The running cluster, or a ``UsageError`` that says to start one."""
        if self.cluster is None or not self.cluster.running:
            raise UsageError(NOT_STARTED)
        return self.cluster

    @line_magic("jax_cluster")
    def jax_cluster_line(self, line: str = "") -> None:
        return jax_cluster.line(self, line)

    @cell_magic("jax_cluster")
    def jax_cluster_cell(self, line: str, cell: str) -> Any:
        return jax_cluster.cell(self, line, cell)

    @cell_magic
    def jax_profile(self, line: str, cell: str) -> None:
        return jax_profile.run(self, line, cell)

    @line_magic
    def jax_pull(self, line: str) -> None:
        return jax_pull_push.pull(self, line)

    @line_magic
    def jax_push(self, line: str) -> None:
        return jax_pull_push.push(self, line)

    @line_magic
    def jax_mesh(self, line: str) -> None:
        return jax_mesh.run(self, line)

    @line_magic
    def jax_debug(self, line: str = "") -> None:
        return jax_debug.run(self, line)

    @line_magic
    def jax_who(self, line: str = "") -> None:
        return jax_who_diff.who(self, line)

    @line_magic
    def jax_diff(self, line: str = "") -> None:
        return jax_who_diff.diff(self, line)

    @needs_local_scope
    @line_magic
    def jax_train(self, line: str, local_ns: dict | None = None) -> Any:
        return jax_train.run(self, line, local_ns)

    @needs_local_scope
    @line_magic
    def jax_tune(self, line: str, local_ns: dict | None = None) -> Any:
        return jax_tune.run(self, line, local_ns)


#: Each magic's declaration, by (kind, name): the function its ``@argument``\ s decorate
#: (``magic_arguments`` makes its help: the usage and every flag), or the function whose
#: docstring is the help of a magic without flags. ``%jax_train?`` shows it; the docs'
#: reference is made from it (docs/_ext/jaxnb_docs.py).
DECLARATIONS: dict[tuple[str, str], Any] = {
    ("line", "jax_cluster"): jax_cluster.jax_cluster,
    ("cell", "jax_cluster"): jax_cluster.jax_cluster_cell,
    ("line", "jax_train"): jax_train.jax_train,
    ("line", "jax_tune"): jax_tune.jax_tune,
    ("cell", "jax_profile"): jax_profile.jax_profile,
    ("line", "jax_mesh"): jax_mesh.run,
    ("line", "jax_pull"): jax_pull_push.pull,
    ("line", "jax_push"): jax_pull_push.push,
    ("line", "jax_debug"): jax_debug.jax_debug,
    ("line", "jax_who"): jax_who_diff.who,
    ("line", "jax_diff"): jax_who_diff.diff,
}
for (_kind, _name), _declared in DECLARATIONS.items():
    getattr(JaxnbMagics, JaxnbMagics.magics[_kind][_name]).__doc__ = _declared.__doc__


def _instance(shell: Any) -> JaxnbMagics | None:
    registry = getattr(getattr(shell, "magics_manager", None), "registry", {})
    found = registry.get(JaxnbMagics.__name__)
    return found if isinstance(found, JaxnbMagics) else None


def current_cluster(shell: Any = None) -> JaxCluster | None:
    """The cluster that ``%jax_cluster`` started in this IPython session (``None`` if none).

    ``shell`` defaults to the running IPython shell.
    """
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    magics = _instance(shell)
    return magics.cluster if magics is not None else None


def use_cluster(cluster: JaxCluster | None, shell: Any = None) -> None:
    """Make the magics of this IPython session drive ``cluster`` (one started from Python)."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    magics = _instance(shell)
    if magics is None:
        raise UsageError("the jaxnb magics are not loaded; run `%load_ext jaxnb` first")
    magics.cluster = cluster


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jaxnb``."""
    if _instance(ipython) is None:
        ipython.register_magics(JaxnbMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext jaxnb``: stops the cluster."""
    magics = _instance(ipython)
    if magics is not None and magics.cluster is not None:
        magics.cluster.stop()
        magics.cluster = None
