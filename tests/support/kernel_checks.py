"""Checks on the cluster of a real kernel (``kernel_harness.Kernel``) that tests and benchmarks share:
is it broken, restart it with the fault cells' setup, read every process's total, its engine pids;
and the one line a ``UsageError`` shows."""

from __future__ import annotations

import inspect
from typing import Any

from .clusters import in_cell, parse_totals
from .fault_cells import SETUP, VERIFY

#: Run once in the kernel before the checks below; it also defines ``in_cell(cluster, processes)``
#: there (``clusters.in_cell``: those processes run a cell now).
PREPARE = ("from typing import Any\nfrom jaxnb._failures import detect as _detect\nimport jaxnb\n"
           + inspect.getsource(in_cell))


def pids(k: Any) -> list[int]:
    """The engine pid of each JAX process, as the kernel knows them."""
    return k.value("[p.pid for p in jaxnb.current_cluster().processes]")


def dead(k: Any) -> list[int]:
    """The JAX processes of the kernel's cluster that are dead."""
    return k.value("sorted(_detect.dead_processes(jaxnb.current_cluster().group))")


def broken(k: Any) -> bool:
    """True when a process is dead or the group is suspect."""
    return bool(dead(k)) or k.value("jaxnb.current_cluster().suspect is not None")


def restart(k: Any) -> Any:
    """``%jax_cluster restart`` as the messages say; then SETUP again. The restart's output."""
    out = k.ok("%jax_cluster restart")
    k.ok("%%jax_cluster\n" + SETUP)
    return out


def healthy(k: Any) -> Any:
    """Restart the kernel's cluster if a test left it broken."""
    if broken(k):
        restart(k)
    return k


def totals(k: Any) -> list[float]:
    """Every process's printed total of VERIFY (raw output of each process)."""
    return parse_totals(k.ok("%%jax_cluster --all --timeout 60\n" + VERIFY).stdout)


def usage_error(out: Any) -> str:
    """The one line a front end shows for a ``UsageError`` (IPython prints it, no traceback)."""
    assert out.error is None, out.shown
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), out.shown
    return lines[0]
