"""``%jax_cluster memory``: ask every process what fills its memory (``JaxCluster.memory()``)."""

from __future__ import annotations

from jaxnb._core import ipp_internals
from jaxnb._core.contract import EngineCall
from jaxnb._core.errors import ClusterStateError, remote_error
from jaxnb._core.memory_text import TOP_ARRAYS, MemoryReport
from jaxnb._core.messages import RESET, labels
from jaxnb._core.state import Group

_SNAPSHOT = EngineCall("jaxnb._engine.memory.readings:snapshot")
#: How long the processes may take to answer (seconds): a busy engine answers after its cell.
ANSWER_SECONDS = 30.0
NO_ANSWER = ("{who} did not answer within {seconds:g} s (still busy with a cell?); wait for "
             "it, or " + RESET)


def query(group: Group, top: int = TOP_ARRAYS) -> MemoryReport:
    """Every process's memory: devices, the process, its ``top`` largest live arrays."""
    ar = group.view.apply_async(_SNAPSHOT, top)
    ar.wait(ANSWER_SECONDS)
    futures = dict(zip(group.indices, ipp_internals.futures(ar, group.client), strict=True))
    late = [p for p, f in futures.items() if not f.done()]
    if late:
        raise ClusterStateError(NO_ANSWER.format(who=labels(late), seconds=ANSWER_SECONDS))
    replies = {p: f.result() for p, f in futures.items()}
    errors = {p: r for p, r in replies.items() if isinstance(r, BaseException)}
    if errors:
        raise remote_error(errors)
    return MemoryReport([replies[p] for p in sorted(replies)])
