"""Batches of process-local NumPy rows as global ``jax.Array``s (``iter_jax_batches``)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def batch_sharding() -> NamedSharding:
    """The batch axis split over every device, process by process (the default layout)."""
    return NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), PartitionSpec("batch"))


def fitted(sharding: jax.sharding.Sharding, ndim: int) -> jax.sharding.Sharding:
    """``sharding`` for a column of ``ndim`` axes: a ``NamedSharding`` whose spec names more
    axes than the column has, all of them ``None`` (``P("data", None)`` for a labels column), is
    cut to the column's axes (JAX 0.11 refuses a longer spec; 0.10 took it)."""
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) <= ndim:
        return sharding
    if any(axis is not None for axis in sharding.spec[ndim:]):
        return sharding  # it splits an axis the column lacks: JAX's own error says so
    return NamedSharding(sharding.mesh, PartitionSpec(*sharding.spec[:ndim]))


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
            sharding = fitted(self.sharding, local.ndim)
            out[key] = jax.make_array_from_process_local_data(sharding, local, shape)
        return out
