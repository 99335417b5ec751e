"""``%jax_who`` and ``%jax_diff NAME``: every process's variables, and the leaves of a pytree that
differ across processes (``JaxCluster.who`` and ``JaxCluster.diff``)."""

from __future__ import annotations

from IPython.core.error import UsageError

from jaxnb._debug.compare import diff_text, who_text
from jaxnb.magics import kit


def who(front: kit.Front, line: str) -> None:
    """``%jax_who``: every process's user variables (type, shape, dtype, sharding, bytes) and
    whether each is the same on every process (from fingerprints: no data moves)."""
    if line.strip():
        raise UsageError(f"%jax_who takes nothing (got {line.strip()!r}); %jax_diff NAME compares one")
    cluster = front.require()
    with kit.api_call():
        print(who_text(cluster.who()))


def diff(front: kit.Front, line: str) -> None:
    """``%jax_diff NAME``: the leaves of the pytree NAME (or an expression) that differ across
    processes: which processes, the leaf's path, the largest difference where shapes agree."""
    name = line.strip()
    if not name or name.startswith("-"):
        raise UsageError("%jax_diff takes one NAME or expression; e.g. %jax_diff params")
    try:
        compile(name, "<%jax_diff>", "eval")
    except SyntaxError:
        raise UsageError(f"%jax_diff: {name!r} is neither a Python name nor an expression; "
                         "e.g. %jax_diff params['w']") from None
    cluster = front.require()
    with kit.api_call(NameError, TypeError):
        print(diff_text(name, cluster.diff(name)))
