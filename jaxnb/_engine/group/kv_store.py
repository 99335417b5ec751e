"""The ``jax.distributed`` key-value store, through which the processes agree without XLA.

No collective: nothing to compile, no device sync, nothing queued behind gloo work.
ending a run on request (:mod:`jaxnb._engine.run.stopping`) and :mod:`.gather` use it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, overload

#: Waits are cut in slices this long so that an interrupt gets through.
WAIT_SLICE_MS = 1000


def client() -> Any | None:
    """The ``jax.distributed`` coordination client, or None without one."""
    from jaxnb._engine.jax_internals import distributed_client

    return distributed_client()


@overload
def wait_for(kv: Any, key: str) -> str: ...
@overload
def wait_for(kv: Any, key: str, give_up: threading.Event) -> str | None: ...


def wait_for(kv: Any, key: str, give_up: threading.Event | None = None) -> str | None:
    """The value of ``key`` once a process has set it (waited for in slices: interruptible);
    ``None`` if ``give_up`` is set first."""
    from jaxnb._engine.jax_internals import timed_out

    while give_up is None or not give_up.is_set():
        started = time.monotonic()
        try:
            return kv.blocking_key_value_get(key, WAIT_SLICE_MS)
        except Exception as exc:  # only a timeout slice is retried (by status code, not words)
            if not timed_out(exc, time.monotonic() - started, WAIT_SLICE_MS / 1000):
                raise
    return None


def delete(key: str) -> None:
    """Delete ``key`` and the keys below it (best effort: nothing there, no client)."""
    kv = client()
    if kv is not None:
        with contextlib.suppress(Exception):
            kv.key_value_delete(key)
