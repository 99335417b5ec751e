"""JAX's persistent compilation cache, as the notebook sees it: what each engine reports.

The cache itself is set up on each engine when it starts (``--compile-cache``, on by
default: :mod:`jaxnb._engine.compile.cache`); the option reaches the engines in their
environment (:func:`jaxnb._lifecycle.launch.engine_environment`).
"""

from __future__ import annotations

from jaxnb._core.contract import EngineCall
from jaxnb._core.state import Group

_DESCRIBE = EngineCall("jaxnb._engine.compile.cache:describe")
#: How long ``status`` waits for the engines' answers (idle engines answer in milliseconds).
ASK_SECONDS = 10.0


def ask(group: Group) -> None:
    """Fill each process's ``compile_cache`` (folder, entries, bytes, hits, …); left as it was
    when the engines do not answer in :data:`ASK_SECONDS`."""
    try:
        answers = group.view.apply_async(_DESCRIBE).get(timeout=ASK_SECONDS)
    except Exception:  # a busy or dying engine: the status shows what it knew before
        return
    for info, cache in zip(group.processes, answers, strict=True):
        info.compile_cache = cache
