"""Where this process sits in the group, in Ray Train's and JAX's words (`jaxnb.get_context()`)."""

from __future__ import annotations

import os
import socket
import sys

from jaxnb._core.contract import ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_NODE_RANK, ENV_PROCESS_ID


def process_index() -> int:
    """This process's JAX process index (from JAX once initialised, else from jaxnb's setup)."""
    jax = sys.modules.get("jax")
    if jax is not None and _distributed_ready():
        return int(jax.process_index())
    return int(os.environ.get(ENV_PROCESS_ID, os.environ.get("JAX_PROCESS_ID", "0")))


def num_processes() -> int:
    """How many JAX processes are in the group."""
    jax = sys.modules.get("jax")
    if jax is not None and _distributed_ready():
        return int(jax.process_count())
    return int(os.environ.get("JAX_NUM_PROCESSES", "1"))


#: The name of the run going on in this process ("" outside a run): set by its start and end.
_experiment = ""


def name_run(name: str) -> None:
    """The run going on in this process is ``name`` from now on (``""``: none)."""
    global _experiment
    _experiment = name


def _distributed_ready() -> bool:
    from jaxnb._engine.jax_internals import distributed_client

    return distributed_client() is not None


class TrainContext:
    """Ray Train's ``get_context()`` for a JAX process (one worker per process)."""

    @property
    def process_index(self) -> int:
        """JAX process index (same as the world rank)."""
        return process_index()

    @property
    def num_processes(self) -> int:
        """Number of JAX processes (same as the world size)."""
        return num_processes()

    def get_world_rank(self) -> int:
        """Rank of this worker among all workers."""
        return process_index()

    def get_world_size(self) -> int:
        """Number of workers."""
        return num_processes()

    def get_local_rank(self) -> int:
        """Rank among the workers on this host."""
        return int(os.environ.get(ENV_LOCAL_RANK, "0"))

    def get_local_world_size(self) -> int:
        """Number of workers on this host."""
        return int(os.environ.get(ENV_LOCAL_WORLD_SIZE, "1"))

    def get_node_rank(self) -> int:
        """Index of this host among the hosts."""
        return int(os.environ.get(ENV_NODE_RANK, "0"))

    def get_experiment_name(self) -> str:
        """The run's name (``--name RUN``, Ray's ``RunConfig(name=...)``; in a search, the
        trial's run); ``""`` outside a run."""
        return _experiment

    def get_hostname(self) -> str:
        """This host's name."""
        return socket.gethostname()

    def __repr__(self) -> str:
        return f"TrainContext(process_index={self.process_index}, num_processes={self.num_processes})"


def get_context() -> TrainContext:
    """The context of this process (call inside a train function or a cell).

    Named as Ray Train's: ``get_world_rank()``, ``get_world_size()``, ``get_local_rank()``,
    ``get_local_world_size()``, ``get_node_rank()``, ``get_experiment_name()``, plus
    ``process_index`` and ``num_processes``.

    Example:
        >>> rank = jaxnb.get_context().get_world_rank()   # doctest: +SKIP
    """
    return TrainContext()
