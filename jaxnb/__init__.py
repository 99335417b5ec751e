"""jaxnb: multi-host JAX from one notebook.

In a notebook: ``%load_ext jaxnb`` then ``%jax_cluster start``. In Python:
:class:`JaxCluster`. Inside cells and train functions on the engines:
:func:`report`, :func:`get_context`, :func:`get_checkpoint`, :func:`should_stop`,
:class:`Checkpoint`.
"""

from jaxnb._cells.replay import ReplayError as ReplayError
from jaxnb._cluster import JaxCluster as JaxCluster
from jaxnb._core.errors import ClusterStateError as ClusterStateError
from jaxnb._core.errors import JaxnbError as JaxnbError
from jaxnb._core.errors import ProcessFailure as ProcessFailure
from jaxnb._core.errors import RemoteError as RemoteError
from jaxnb._core.errors import StartError as StartError
from jaxnb._core.run_folder import Checkpoint as Checkpoint
from jaxnb._core.state import ProcessInfo as ProcessInfo
from jaxnb._engine.context import get_context as get_context
from jaxnb._engine.reporting import get_checkpoint as get_checkpoint
from jaxnb._engine.reporting import report as report
from jaxnb._engine.reporting import should_stop as should_stop
from jaxnb._mesh import show_mesh as show_mesh
from jaxnb._mesh import show_sharding as show_sharding
from jaxnb._train.result import Result as Result

__version__ = "0.1.0"


def current_cluster():
    """The cluster ``%jax_cluster start`` started in this IPython session, or ``None``."""
    from jaxnb.magics import current_cluster as find

    return find()


def load_ipython_extension(ipython):
    """``%load_ext jaxnb``: register the magics."""
    from jaxnb.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext jaxnb``: stop the cluster."""
    from jaxnb.magics import unload_ipython_extension as unload

    unload(ipython)
