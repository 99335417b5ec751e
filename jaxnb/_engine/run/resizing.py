"""A run with ``min_processes``: at each checkpoint, the processes agree whether to end the
attempt there, so that the group restarts at another size (growing back, ``scale(N)``).

The notebook asks by sending ``RESIZE_SIGNAL`` to every engine; the handler only sets a flag.
After each checkpoint pytree is saved (all processes save it together), process 0 writes its
flag in the ``jax.distributed`` key-value store and the others read it: one small exchange per
checkpoint, none between. They then end together: ``report()`` raises
:class:`ResizeAtCheckpoint`, which the run catches (the checkpoint and its data positions are
on disk, every report is sent). Only checkpoints jaxnb saves count: a directory reported by
process 0 alone is no moment the others share.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from jaxnb._core.contract import RESIZE_SIGNAL
from jaxnb._engine.group import kv_store

KEY_ROOT = "jaxnb/resize/"

_requested = False


class ResizeAtCheckpoint(BaseException):
    """Ends the train function right after a checkpoint, on every process together (a
    ``BaseException``, as ``KeyboardInterrupt``: a loop's ``except Exception`` lets it through)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"the group changes size at the checkpoint of step {step}")
        self.step = step


def _on_signal(signum: int, frame: Any) -> None:
    global _requested
    _requested = True


def arm() -> None:
    """Install the handler (main thread) and forget an earlier request."""
    global _requested
    _requested = False
    signal.signal(RESIZE_SIGNAL, _on_signal)


class Agreement:
    """Whether to end at a checkpoint, agreed by every process of one attempt."""

    def __init__(self, run_id: str, process: int, num_processes: int) -> None:
        self.process = process
        self.client = kv_store.client() if num_processes > 1 else None
        self.prefix = f"{KEY_ROOT}{run_id}/"
        self.checkpoints = 0

    def at_checkpoint(self, step: int) -> None:
        """After a checkpoint is saved: raise :class:`ResizeAtCheckpoint` if a resize was asked."""
        key, self.checkpoints = f"{self.prefix}{self.checkpoints}", self.checkpoints + 1
        if self.client is None:
            agreed = _requested
        elif self.process == 0:
            agreed = _requested
            self.client.key_value_set(key, "1" if agreed else "0")
        else:
            agreed = kv_store.wait_for(self.client, key) == "1"
        if agreed:
            raise ResizeAtCheckpoint(step)


def meshes(namespace: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The ``jax.sharding.Mesh`` objects among the user's variables: name -> [[axis, size], ...]."""
    jax = sys.modules.get("jax")
    if jax is None:
        return {}
    return {name: [[str(axis), int(n)] for axis, n in value.shape.items()]
            for name, value in namespace.items()
            if isinstance(value, jax.sharding.Mesh) and not name.startswith("_")}
