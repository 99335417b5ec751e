"""Fetch a named value from every process for ``%jax_pull`` (global arrays gathered)."""

from __future__ import annotations

import sys
from typing import Any

from jaxnb._core.contract import ELSEWHERE, MISSING


def user_namespace() -> dict[str, Any]:
    """The engine's interactive namespace (where ``%%jax_cluster`` cells define names)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return vars(sys.modules["__main__"])
    shell = get_ipython()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def lookup(name: str) -> Any:
    """The value of ``name``, or of an expression such as ``params['w1']``, on this engine.

    Raises ``NameError`` or ``TypeError`` with a one-line message that says what to do.
    """
    namespace = user_namespace()
    if name.isidentifier():
        if name not in namespace:
            raise NameError(
                f"name {name!r} is not defined on the engines; define it in a %%jax_cluster cell"
            )
        return namespace[name]
    try:
        return eval(name, namespace)
    except NameError as exc:
        raise NameError(f"{name}: {exc}; define it in a %%jax_cluster cell") from None
    except Exception as exc:
        raise TypeError(
            f"{name} could not be evaluated on the engines: {type(exc).__name__}: {exc}"
        ) from None


def fetch(name: str) -> Any:
    """Run on every process at once: the value of ``name`` as process 0 should send it.

    A ``jax.Array`` that spans processes is gathered with a collective (so every
    process must take part) and only process 0 returns the NumPy copy.
    """
    namespace = user_namespace()
    if name not in namespace:
        return MISSING
    value = namespace[name]


    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        import numpy as np

        if value.is_fully_addressable:
            gathered = np.asarray(value) if jax.process_index() == 0 else None
        else:
            from jax.experimental import multihost_utils

            gathered = np.asarray(multihost_utils.process_allgather(value, tiled=True))
        return gathered if jax.process_index() == 0 else ELSEWHERE
    from jaxnb._engine.group import context

    return value if context.process_index() == 0 else ELSEWHERE


#: A cell's value bigger than this (pickled bytes) stays on the engines; the notebook shows it.
LAST_VALUE_LIMIT = 64 * 2**20


def last_value() -> Any:
    """Process 0's value of the cell just run (IPython's ``_``), pickled, for the notebook's
    ``Out[n]``; ``None`` when it should stay here (a JAX array, too big, cannot be pickled)."""
    value = user_namespace().get("_")
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        return None  # the notebook never loads JAX: it gets the display instead
    import cloudpickle

    try:
        data = cloudpickle.dumps(value)
    except Exception:
        return None
    return data if len(data) <= LAST_VALUE_LIMIT else None
