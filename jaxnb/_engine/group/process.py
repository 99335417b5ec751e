"""Join this engine to the ``jax.distributed`` group and describe it.

Called by the notebook through ipyparallel's ``apply`` on every engine at once.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from jaxnb._core.contract import (
    ENV_CONTROLLER_ADDRESS,
    ENV_LOCAL_RANK,
    ENV_LOCAL_WORLD_SIZE,
    ENV_NODE_RANK,
    ENV_PLATFORM,
    ENV_PROCESS_ID,
    KUBEFLOW_VARIABLES,
    JoinParams,
)
from jaxnb._engine import jax_internals
from jaxnb._engine.boot import stderr_tee


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on this host right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def identity() -> tuple[str, int]:
    """This engine's host name and pid."""
    return socket.gethostname(), os.getpid()


def pids() -> tuple[int, int]:
    """This engine's pid and its parent's (on another host: the shell that reports its exit)."""
    return os.getpid(), os.getppid()


def host_address() -> str:
    """An address other hosts can reach this one on: the address of this host's interface
    that routes to the notebook's machine (from the routing table, never from the hostname)."""
    controller = os.environ.get(ENV_CONTROLLER_ADDRESS)
    if not controller:
        return "127.0.0.1"  # a local cluster: everything on loopback
    from jaxnb._core.host_entries import route_address

    return route_address(controller)


def set_identity(params: JoinParams) -> None:
    """Export this process's place in the group (Kubeflow-style variables, local rank)."""
    local_rank, local_size, node_rank = params.placement
    os.environ[ENV_LOCAL_RANK] = str(local_rank)
    os.environ[ENV_LOCAL_WORLD_SIZE] = str(local_size)
    os.environ[ENV_NODE_RANK] = str(node_rank)
    num, pid, address = KUBEFLOW_VARIABLES
    os.environ[num] = str(params.num_processes)
    os.environ[pid] = str(params.process_id)
    os.environ[address] = params.coordinator
    os.environ[ENV_PROCESS_ID] = str(params.process_id)


def initialize(params: JoinParams) -> dict[str, Any]:
    """Set this engine's identity, join ``jax.distributed`` (unless ``--no-init``), describe."""
    from jaxnb._engine.debug import hooks
    from jaxnb._engine.memory import oom_note

    hooks.install()  # %jax_debug and jaxnb.breakpoint() (cheap: two callbacks)
    set_identity(params)
    oom_note.watch_cells()  # a cell's out-of-memory error is noted where it happens
    if params.init:
        import jax

        # JAX's preemption service is off through JAX_ENABLE_PREEMPTION_SERVICE (set at launch).
        if os.environ.get(ENV_PLATFORM) == "tpu" and "tpu" in os.environ.get("JAX_PLATFORMS", "tpu"):
            # On a TPU VM slice JAX finds the coordinator and the process ids itself (jaxnb
            # numbers its processes in the same worker order). Engines told to run on CPU
            # instead (the test lab) join explicitly below.
            jax.distributed.initialize(
                heartbeat_timeout_seconds=params.heartbeat_timeout,
                initialization_timeout=params.init_timeout,
            )
        elif params.num_processes > 1:
            join_group(params)
    if params.init and params.num_processes > 1:
        _first_collective()
    if params.init:
        from jaxnb._engine.group import init_guard
        from jaxnb._engine.run import step_cost

        init_guard.install()  # Kubeflow-style code may call initialize() again
        step_cost.watch_jit_calls()  # a train function's step may be first called in a cell
    from jaxnb._engine.boot import warm

    warm.watch_cells()  # what the cells import, spares import too
    return describe(params.process_id, touch_backend=params.init)


def join_group(params: JoinParams) -> None:
    """``jax.distributed.initialize`` with jaxnb's bounded timeouts (start and repair)."""
    import jax

    if os.environ.get(ENV_CONTROLLER_ADDRESS):  # several hosts: gloo on this host's address
        jax_internals.use_gloo_address(host_address())
    if params.process_id > 0:
        _wait_for_coordinator(params.coordinator, params.init_timeout)
    ids = list(params.local_device_ids) if params.local_device_ids is not None else None
    jax.distributed.initialize(
        coordinator_address=params.coordinator,
        num_processes=params.num_processes,
        process_id=params.process_id,
        local_device_ids=ids,
        coordinator_bind_address=params.bind_address,
        heartbeat_timeout_seconds=params.heartbeat_timeout,
        initialization_timeout=params.init_timeout,
    )


def _wait_for_coordinator(coordinator: str, timeout: float) -> None:
    """Wait until process 0's coordination service accepts connections.

    JAX's client backs off for most of a second when its first connection is
    refused, so connecting only once the port listens makes joining faster.
    """
    host, port = coordinator.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"process 0's coordinator at {coordinator} did not accept connections within "
                    f"{timeout:g} s ({exc}); check that this host can reach it"
                ) from None
            time.sleep(0.01)


def _first_collective() -> None:
    """One tiny all-gather, so the group is proven and gloo's connect banner is not in a cell."""
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    multihost_utils.process_allgather(jnp.ones(1))


def describe(process_id: int | None = None, *, touch_backend: bool = True) -> dict[str, Any]:
    """Host, pid, platform and devices of this process.

    With ``touch_backend=False`` (``--no-init`` clusters before the user's own
    ``jax.distributed.initialize``) JAX's backend is left alone.
    """
    info: dict[str, Any] = {
        "process_index": process_id,
        "host": socket.gethostname(),
        "address": host_address(),
        "pid": os.getpid(),
        "parent_pid": os.getppid(),
        "log_writer_pid": stderr_tee.pid(),
        "platform": None,
        "local_devices": [],
        "global_device_count": None,
        "distributed": False,
    }
    if not touch_backend and not backend_ready():
        return info
    import jax

    info["distributed"] = jax_internals.in_group()
    info["process_index"] = jax.process_index()
    info["platform"] = jax.default_backend()
    info["local_devices"] = [
        {"id": d.id, "kind": d.device_kind, "platform": d.platform} for d in jax.local_devices()
    ]
    info["global_device_count"] = jax.device_count()
    return info


def backend_ready() -> bool:
    """True once JAX has created its backends in this process."""
    import sys

    return "jax" in sys.modules and jax_internals.backends_created()


def shutdown() -> None:
    """Leave the ``jax.distributed`` group (used before stopping the engines)."""
    import contextlib

    import jax

    with contextlib.suppress(Exception):  # best effort on the way out
        jax.distributed.shutdown()
