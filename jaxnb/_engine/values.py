"""Fetch a named value from every process for ``%jax_pull`` (global arrays gathered)."""

from __future__ import annotations

from typing import Any

from jaxnb._core.contract import ELSEWHERE, MISSING


def user_namespace() -> dict[str, Any]:
    """The engine's interactive namespace (where ``%%jax_cluster`` cells define names)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        return shell.user_ns
    import __main__

    return vars(__main__)


def fetch(name: str) -> Any:
    """Run on every process at once: the value of ``name`` as process 0 should send it.

    A ``jax.Array`` that spans processes is gathered with a collective (so every
    process must take part) and only process 0 returns the NumPy copy.
    """
    namespace = user_namespace()
    if name not in namespace:
        return MISSING
    value = namespace[name]
    import sys

    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        import numpy as np

        if value.is_fully_addressable:
            gathered = np.asarray(value) if jax.process_index() == 0 else None
        else:
            from jax.experimental import multihost_utils

            gathered = np.asarray(multihost_utils.process_allgather(value, tiled=True))
        return gathered if jax.process_index() == 0 else ELSEWHERE
    from jaxnb._engine import context

    return value if context.process_index() == 0 else ELSEWHERE
