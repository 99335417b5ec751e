"""Batches of process-local NumPy rows as global ``jax.Array``s (``iter_jax_batches``)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def batch_sharding() -> NamedSharding:
    """The batch axis split over every device, process by process (the default layout)."""
    return NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), PartitionSpec("batch"))


class ToGlobal:
    """Maps a dict of this process's rows to a dict of global arrays laid out by ``sharding``."""

    def __init__(self, sharding: jax.sharding.Sharding, global_batch_size: int) -> None:
        self.sharding, self.global_batch_size = sharding, global_batch_size
        self.per_process = global_batch_size // jax.process_count()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        out = {}
        for key, local in batch.items():
            rows = len(local)  # fewer than per_process only in a last, partial batch
            shape = (rows * jax.process_count(), *local.shape[1:])
            out[key] = jax.make_array_from_process_local_data(self.sharding, local, shape)
        return out
