"""The contract between the notebook and its engines, written down in one place.

Both sides import this module and nothing else of each other: the names of the
environment variables an engine is started with, the signals the notebook
sends, where an engine writes its stack dumps, the key its reports are
published under, the parameters of joining ``jax.distributed`` (one picklable
record), and :class:`EngineCall`, which names an engine function by its import
path so that the notebook never imports engine code (nor, through it, JAX).
Pure Python: no JAX, no IPython, no ipyparallel.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import signal
from typing import Any

# ---- environment variables set on every engine before it starts ------------------------

#: Folder where each engine writes its stack dumps (see :func:`stack_file`).
ENV_STACKS_DIR = "JAXNB_STACKS_DIR"
#: ``cpu``, ``gpu`` or ``tpu``: the platform the cluster was started for.
ENV_PLATFORM = "JAXNB_PLATFORM"
#: The notebook kernel's pid: engines and controller exit when it is gone (watchdog).
ENV_PARENT_PID = "JAXNB_PARENT_PID"
#: ``1``: the process named by :data:`ENV_PARENT_PID` is not the launcher but a named cluster's
#: supervisor (its own session): only its end counts, not the launching kernel's.
ENV_PARENT_ONLY = "JAXNB_WATCH_PARENT_ONLY"
#: Files (``os.pathsep``-separated) the watchdog removes when the kernel is gone.
ENV_CLEANUP_FILES = "JAXNB_CLEANUP_FILES"
#: The controller's pid, which a local engine's watchdog stops with it.
ENV_CONTROLLER_PID = "JAXNB_CONTROLLER_PID"
#: Engines on other hosts: the notebook machine's address (each finds its own routable
#: address from it, for the coordinator and for gloo).
ENV_CONTROLLER_ADDRESS = "JAXNB_CONTROLLER_ADDRESS"
#: ``--workdir``: the folder an engine starts in (and puts first on ``sys.path``) on its host.
ENV_WORKDIR = "JAXNB_WORKDIR"
#: ``--workdir`` copied to some hosts: JSON {hostname: its folder} (engines not started by ssh).
ENV_WORKDIR_BY_HOST = "JAXNB_WORKDIR_BY_HOST"
#: ``--compile-cache``: the folder of JAX's persistent compilation cache (a leading ``~`` is the
#: engine's host's home), :data:`COMPILE_CACHE_OFF`, or empty: the default on each host
#: (``$XDG_CACHE_HOME/jaxnb/xla``, else ``~/.cache/jaxnb/xla``).
ENV_COMPILE_CACHE = "JAXNB_COMPILE_CACHE"
COMPILE_CACHE_OFF = "off"
#: Set on spares only: the third-party modules the group's engines have imported
#: (comma-separated), imported by the spare before it registers (see ``IMPORTED_KEY``).
ENV_WARM_MODULES = "JAXNB_WARM_MODULES"

# ---- set on every engine when it joins the group ---------------------------------------

ENV_PROCESS_ID = "JAXNB_PROCESS_ID"
ENV_LOCAL_RANK = "JAXNB_LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "JAXNB_LOCAL_WORLD_SIZE"
ENV_NODE_RANK = "JAXNB_NODE_RANK"
#: What the Kubeflow JAX runtime injects, so code written for it runs unchanged.
KUBEFLOW_VARIABLES = ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")

# ---- signals the notebook sends to engines ----------------------------------------------

#: Dump the main thread's Python stack to :func:`stack_file` (faulthandler, works in C code).
STACK_SIGNAL = signal.SIGUSR1
#: Ask a training run to stop: every process ends it at the same ``jaxnb.report()``.
STOP_SIGNAL = signal.SIGUSR2
#: Ask a ``--min-processes`` run to end its attempt at the next checkpoint, so that the group
#: restarts at another size (ignored by default: a late one never ends an engine).
RESIZE_SIGNAL = signal.SIGURG

# ---- data sent back -----------------------------------------------------------------------

#: Report batches are published as ``f"{REPORT_KEY}{n}"``, n = 0, 1, … (ipyparallel datapub).
REPORT_KEY = "jaxnb/"
#: After a cell that imported third-party modules, an engine publishes their names under
#: this key (ipyparallel datapub): what warm spares import.
IMPORTED_KEY = "jaxnb-imported"
#: ``jaxnb.breakpoint()``: a process publishes where it stopped under this key (ipyparallel
#: datapub; the value is the latest stop: ``id``, ``where``, ``source``).
BREAKPOINT_KEY = "jaxnb-breakpoint"
#: A training run's latest sample (memory, time split, FLOPs per step) is published under this
#: key about once a second; each sample holds totals, so the last one received is what counts.
MONITOR_KEY = "jaxnb-monitor"
#: XLA refusing an allocation: ``RESOURCE_EXHAUSTED: Out of memory …`` on one device, ``INTERNAL:
#: Error dispatching computation: Out of memory allocating N bytes.`` for a program of several
#: devices, ``Ran out of memory in memory space hbm`` on a TPU (both sides find it so).
#: A ``RESOURCE_EXHAUSTED`` without memory or an allocation on its line is not a device's (gRPC's
#: "received message larger than max", a coordination-service limit).
OUT_OF_MEMORY = (r"RESOURCE_EXHAUSTED\b[^\n]*(?:[Mm]emory|[Aa]llocat)"
                 r"|[Oo]ut of memory (?:allocating|while trying)"
                 r"|[Rr]an out of memory in memory space")
#: ``%jax_pull``: what a process answers when the name is not defined there.
MISSING = "__jaxnb_missing__"
#: ``%jax_pull``: what processes other than 0 answer (process 0 sends the value).
ELSEWHERE = "__jaxnb_on_process_0__"


def stack_file(folder: str, pid: int) -> str:
    """The file where engine ``pid`` writes its stack when sent :data:`STACK_SIGNAL`."""
    return os.path.join(folder, f"jaxnb-stacks-{pid}.txt")


@dataclasses.dataclass(frozen=True)
class JoinParams:
    """How one process joins the ``jax.distributed`` group (at start and at repair)."""

    process_id: int
    num_processes: int
    coordinator: str
    #: Where process 0's coordination service listens (``None``: JAX's default).
    bind_address: str | None
    heartbeat_timeout: int
    init_timeout: int
    #: ``False`` for ``--no-init``: jaxnb sets the variables but leaves initialising to you.
    init: bool = True
    #: One GPU per process: the local rank picks it. ``None``: every local device.
    local_device_ids: tuple[int, ...] | None = None
    #: (local rank, local world size, node rank).
    placement: tuple[int, int, int] = (0, 1, 0)


@dataclasses.dataclass(frozen=True)
class EngineCall:
    """A function of the engine code named by ``"module:function"``, imported where it runs.

    ipyparallel pickles this small record instead of the function, so the
    notebook sends engine code without importing it.
    """

    target: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<engine function {self.target}>"
