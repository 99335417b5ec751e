"""The name an unnamed start gets in a Jupyter kernel: ``default``.

A cluster started on this machine from a kernel without ``--name`` is named ``default`` (or
``default-2``, ``default-3`` … while that name runs), so that it outlives a kernel that
restarts or dies and ``%jax_cluster attach`` (no name) finds it. With no kernel attached and
nothing running it stops itself after :data:`DEFAULT_IDLE_SECONDS` (``--idle-timeout S`` sets
another), and at once when the kernel that started or last attached it is shut down on purpose
(not restarted: ``JaxCluster._stop_if_shut_down``). A cluster started by a script (no kernel), or on other
hosts, stays unnamed: it ends with the process that started it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxnb._core import ipykernel_internals
from jaxnb._core.cluster_names import DEFAULT_NAME
from jaxnb._core.errors import ClusterStateError
from jaxnb._core.options import ClusterOptions

#: How long a cluster named by default lives with no kernel attached and nothing running.
DEFAULT_IDLE_SECONDS = 300.0
#: How many ``default-N`` names are tried.
MOST = 100
LEFT_RUNNING = ("jaxnb: cluster {taken!r} runs on this machine with no kernel attached (its "
                "engines' state and runs kept; `%jax_cluster attach` takes it over); this one is "
                "named {name!r}")
HELD = ("jaxnb: cluster {taken!r} runs in another kernel; this one is named {name!r} (another "
        "kernel attaches it with `%jax_cluster attach {name}`)")
SCRIPT = ("idle_timeout= is for a cluster that outlives the process that started it: one started "
          "in a Jupyter kernel, or named; pass name='exp1' too, or drop idle_timeout=")


def applies(options: ClusterOptions, in_kernel: Callable[[], bool] = ipykernel_internals.in_kernel
            ) -> bool:
    """Whether a start with ``options`` is named by default (unnamed, on this machine, in a
    kernel). ``ClusterStateError`` for an idle timeout that nothing would count."""
    if options.name is not None or not options.is_local:
        return False
    if in_kernel():
        return True
    if options.idle_timeout is not None:
        raise ClusterStateError(SCRIPT)
    return False


def free_name(running: Callable[[str], bool]) -> str:
    """``default``, else the first ``default-N`` (N ≥ 2) that no running cluster has."""
    for number in range(1, MOST + 1):
        name = DEFAULT_NAME if number == 1 else f"{DEFAULT_NAME}-{number}"
        if not running(name):
            return name
    raise ClusterStateError(f"{MOST} clusters named {DEFAULT_NAME}… run on this machine; stop "
                            f"some (`python -m jaxnb list`, `python -m jaxnb stop NAME`) or pass "
                            f"--name NAME")


def named(options: ClusterOptions, running: Callable[[str], bool],
          left_running: Callable[[str], bool]) -> tuple[ClusterOptions, str | None]:
    """``options`` with the default name and idle timeout, and the line that says why the name
    is not ``default`` (``None`` when it is). ``running(name)``: a cluster of that name runs on
    this machine; ``left_running(name)``: with no kernel attached."""
    name = free_name(running)
    idle = options.idle_timeout if options.idle_timeout is not None else DEFAULT_IDLE_SECONDS
    note = None
    if name != DEFAULT_NAME:
        said = LEFT_RUNNING if left_running(DEFAULT_NAME) else HELD
        note = said.format(taken=DEFAULT_NAME, name=name)
    return dataclasses.replace(options, name=name, idle_timeout=idle), note
