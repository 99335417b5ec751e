"""A second ``jax.distributed.initialize`` on a group jaxnb already joined.

Kubeflow-style code calls ``jax.distributed.initialize(...)`` itself. On a cluster
started without ``--no-init``, JAX would refuse that call ("should only be called
once"). When the call asks for the group this process is already in, it is
skipped with a one-line note; when it asks for another, the error says what to do.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

SKIPPED = (
    "jaxnb: jax.distributed.initialize() skipped: jaxnb already joined this process to the "
    "group (start with `%jax_cluster start --no-init` to initialise it yourself)"
)
_original: Callable[..., Any] | None = None


def install() -> None:
    """Wrap ``jax.distributed.initialize`` (once) so a repeated call is handled as above."""
    global _original
    import jax

    if _original is not None:
        return
    original = _original = jax.distributed.initialize
    signature = inspect.signature(original)

    @functools.wraps(original)
    def initialize(*args: Any, **kwargs: Any) -> None:
        from jaxnb._engine.jax_internals import distributed_state

        state = distributed_state()
        if getattr(state, "client", None) is None:  # not initialised (or shut down), or a JAX
            return original(*args, **kwargs)  # whose state jaxnb cannot read: JAX's own call
        asked = signature.bind(*args, **kwargs).arguments
        running = {name: getattr(state, name, None)
                   for name in ("coordinator_address", "num_processes", "process_id")}
        differ = [
            f"{name}={asked[name]!r} (running: {value!r})"
            for name, value in running.items()
            if asked.get(name) is not None and asked[name] != value
        ]
        if differ:
            raise RuntimeError(
                "jax.distributed is already initialised by jaxnb with other settings: "
                + ", ".join(differ)
                + "; start the cluster with `%jax_cluster start --no-init` to initialise it "
                "yourself"
            )
        print(SKIPPED, file=sys.stderr)
        return None

    jax.distributed.initialize = initialize
