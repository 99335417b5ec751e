"""jaxnb: multi-host JAX from one notebook.

In a notebook: ``%load_ext jaxnb`` then ``%jax_cluster start`` (:mod:`jaxnb.magics`). In
Python: :class:`JaxCluster`, and :mod:`jaxnb.tune` for searches. Inside cells and train
functions on the engines: :func:`report`, :func:`get_context`, :func:`get_checkpoint`,
:func:`get_dataset_shard`, :func:`should_stop`, :func:`breakpoint`, :class:`Checkpoint`,
:func:`show_mesh`, :func:`show_sharding`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxnb import tune as tune
    from jaxnb._cluster import JaxCluster as JaxCluster
    from jaxnb._cluster_attach import clusters as clusters
    from jaxnb._core.errors import ClusterStateError as ClusterStateError
    from jaxnb._core.errors import JaxnbError as JaxnbError
    from jaxnb._core.errors import ProcessFailure as ProcessFailure
    from jaxnb._core.errors import RemoteError as RemoteError
    from jaxnb._core.errors import StartError as StartError
    from jaxnb._core.replay import ReplayError as ReplayError
    from jaxnb._core.run_folder import Checkpoint as Checkpoint
    from jaxnb._core.state import ProcessInfo as ProcessInfo
    from jaxnb._engine.datasets.data_run import get_dataset_shard as get_dataset_shard
    from jaxnb._engine.group.context import get_context as get_context
    from jaxnb._engine.run.reporting import get_checkpoint as get_checkpoint
    from jaxnb._engine.run.reporting import report as report
    from jaxnb._engine.run.reporting import should_stop as should_stop
    from jaxnb._mesh import show_mesh as show_mesh
    from jaxnb._mesh import show_sharding as show_sharding
    from jaxnb._profile.result import ProfileResult as ProfileResult
    from jaxnb._train.result import Result as Result
    from jaxnb._tune.result import TuneResult as TuneResult

#: Every public name, loaded on first use: name -> "module:attribute" (or a module). So
#: ``import jaxnb`` loads nothing else: a kernel's ``%load_ext jaxnb`` and ``attach`` load only
#: what they use. The engine side (``report`` ...) loads no notebook-side library (no
#: matplotlib, ipywidgets or ipyparallel launcher; tests/test_structure.py checks).
_LAZY = {
    "tune": "jaxnb.tune",
    "JaxCluster": "jaxnb._cluster:JaxCluster",
    "clusters": "jaxnb._cluster_attach:clusters",
    "Result": "jaxnb._train.result:Result",
    "ProfileResult": "jaxnb._profile.result:ProfileResult",
    "ReplayError": "jaxnb._core.replay:ReplayError",
    "TuneResult": "jaxnb._tune.result:TuneResult",
    "ClusterStateError": "jaxnb._core.errors:ClusterStateError",
    "JaxnbError": "jaxnb._core.errors:JaxnbError",
    "ProcessFailure": "jaxnb._core.errors:ProcessFailure",
    "RemoteError": "jaxnb._core.errors:RemoteError",
    "StartError": "jaxnb._core.errors:StartError",
    "Checkpoint": "jaxnb._core.run_folder:Checkpoint",
    "ProcessInfo": "jaxnb._core.state:ProcessInfo",
    "get_dataset_shard": "jaxnb._engine.datasets.data_run:get_dataset_shard",
    "get_context": "jaxnb._engine.group.context:get_context",
    "get_checkpoint": "jaxnb._engine.run.reporting:get_checkpoint",
    "report": "jaxnb._engine.run.reporting:report",
    "should_stop": "jaxnb._engine.run.reporting:should_stop",
    "show_mesh": "jaxnb._mesh:show_mesh",
    "show_sharding": "jaxnb._mesh:show_sharding",
}

#: The public names: the reference documents each one (tests/test_docs.py checks).
__all__ = [
    "Checkpoint", "ClusterStateError", "JaxCluster", "JaxnbError", "ProcessFailure", "ProcessInfo",
    "ProfileResult", "RemoteError", "ReplayError", "Result", "StartError", "TuneResult",
    "breakpoint", "clusters", "current_cluster", "get_checkpoint", "get_context", "get_dataset_shard",
    "load_ipython_extension", "report", "should_stop", "show_mesh", "show_sharding", "tune",
    "unload_ipython_extension",
]


def breakpoint() -> None:
    """Stop every process that reaches this line: the notebook gets a debugger prompt whose
    commands go to one process (``p1: p x``) or all (``all: p x.shape``); ``c`` continues
    them all. Headless (papermill), a one-line note and no stop, unless ``%jax_debug -c``
    gave the commands first."""
    import inspect

    from jaxnb._engine.debug.stop import stop_here

    here = inspect.currentframe()
    stop_here(here.f_back if here is not None and here.f_back is not None else here)  # type: ignore[arg-type]


def __getattr__(name: str) -> Any:
    """Load a notebook-side name (``jaxnb.JaxCluster``, ``jaxnb.tune``, ...) when it is first used."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'jaxnb' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    if attribute:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"


def current_cluster():
    """The cluster ``%jax_cluster start`` started in this IPython session, or ``None``.

    Example:
        >>> jaxnb.current_cluster().pull("params")   # doctest: +SKIP
    """
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
