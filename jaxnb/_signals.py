"""Send a signal to some of the cluster's processes.

Local engines are signalled by pid (they run without ipyparallel's nanny
process, which saves a Python process per engine at start); remote engines
through ipyparallel's ``send_signal``, which their nanny carries out.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jaxnb._cluster import JaxCluster


def signal_processes(cluster: JaxCluster, processes: list[int], signum: int) -> None:
    """Send ``signum`` to the JAX processes ``processes`` (processes already gone are skipped)."""
    if not processes:
        return
    if cluster.options.is_local:
        for p in processes:
            with contextlib.suppress(OSError):
                os.kill(cluster.processes[p].pid, signum)
        return
    engines = [cluster.processes[p].engine_id for p in processes]
    cluster.client.send_signal(signum, targets=engines, block=True)
