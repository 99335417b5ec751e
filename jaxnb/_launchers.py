"""ipyparallel's engine launchers, remembered for the whole life of a cluster.

In a Jupyter kernel an asyncio loop is running, so ipyparallel starts engines
on a thread of its own whose event loop keeps running. When an engine exits,
its launcher's wait thread reaps it and that loop at once drops the launcher
from ``engine_set.launchers``: looking launchers up there finds no dead
process at all. jaxnb keeps every launcher it has seen (its ``psutil.Process``
keeps the exit code once reaped; its log file keeps the last lines).
"""

from __future__ import annotations

import weakref
from typing import Any

_SEEN: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()


def engine_launchers(ipp_cluster: Any) -> list[Any]:
    """Every engine launcher of ``ipp_cluster`` seen so far, running or not.

    Call it right after starting engines, so that each launcher is seen before
    its engine can exit.
    """
    if ipp_cluster is None:
        return []
    seen = _SEEN.setdefault(ipp_cluster, {})
    for set_id, engine_set in list(ipp_cluster.engines.items()):
        for identifier, launcher in list(getattr(engine_set, "launchers", {}).items()):
            seen.setdefault((str(set_id), str(identifier)), launcher)
    return list(seen.values())

