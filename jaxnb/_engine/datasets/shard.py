"""One process's share of a dataset, read in batches by a Grain pipeline (Ray's ``DataIterator``).

Process p of P gets rows p, p+P, p+2P, … of the first ``P * (N // P)`` rows, so
every process has the same number of rows and therefore the same number of
batches per pass (an uneven remainder would leave the others waiting forever in
a collective); the last ``N mod P`` rows of each epoch are left out. Each call
of ``iter_batches`` / ``iter_jax_batches`` is one pass (one epoch) over the share,
in order or shuffled anew each epoch (a NumPy permutation seeded by the seed and the
epoch). The pipeline is Grain's: ``MapDataset.range`` over the batches → ``map`` (the
batch's row indices, then one read of those rows) → ``to_iter_dataset`` (batches read
ahead by Grain's threads), plus ``ThreadPrefetchIterDataset`` for
the device transfer of ``iter_jax_batches``; its ``get_state()`` is the position
that goes with every checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import grain
import numpy as np

from jaxnb._core.messages import plural
from jaxnb._core.spelling import example
from jaxnb._engine.datasets.source import DatasetError, Source
from jaxnb._engine.run import timing


class BatchIterator(Iterator[dict[str, Any]]):
    """One pass over a process's share: batches, and the position after the last one taken."""

    def __init__(self, shard: DatasetShard, settings: dict[str, Any], epoch: int,
                 state: dict[str, Any] | None, to_device: Any = None, taken: int = 0) -> None:
        self.shard, self.settings, self.epoch = shard, settings, epoch
        self.batches, self.taken = shard.batch_count(settings), taken
        self._it = shard.pipeline(settings, epoch, to_device)
        self._final: dict[str, Any] | None = None
        if state is not None:
            self._it.set_state(state)

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            raise StopIteration
        try:
            with timing.counting("data"):  # the run waits for its next batch
                batch = next(self._it)
            self.taken += 1
            return batch
        except StopIteration:
            self.close()
            raise

    def position(self) -> dict[str, Any]:
        """Where the next batch comes from (JSON): epoch, Grain's state, the settings."""
        state = self._it.get_state() if self._it is not None else self._final
        return {"epoch": self.epoch, "state": state, "taken": self.taken, "batches": self.batches,
                **self.settings,
                "num_processes": self.shard.num_processes, "rows": self.shard.source.length}

    def close(self) -> None:
        """Stop the reading threads (done at the end of the pass, and of the run)."""
        it, self._it = self._it, None
        if it is not None:
            self._final = it.get_state()
            it.close()


class DatasetShard:
    """This process's share of dataset ``name`` (from ``jaxnb.get_dataset_shard(name)``)."""

    def __init__(self, source: Source, process: int, num_processes: int,
                 resume: dict[str, Any] | None = None) -> None:
        self.source, self.name = source, source.name
        self.process, self.num_processes = process, num_processes
        self.rows = source.length // num_processes
        self._resume = resume
        self._epoch = -1
        self.current: BatchIterator | None = None

    def __repr__(self) -> str:
        return (f"<DatasetShard {self.name!r}: {self.rows} rows on process {self.process} of "
                f"{self.num_processes}>")

    def count(self) -> int:
        """Rows in this process's share (every process has as many)."""
        return self.rows

    # ---- Ray's DataIterator ------------------------------------------------------------

    def iter_batches(self, *, batch_size: int = 256, batch_format: str = "numpy",
                     prefetch_batches: int = 1, drop_last: bool = False,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> BatchIterator:
        """One epoch of dicts of NumPy arrays, ``batch_size`` rows of this process each.

        ``local_shuffle_buffer_size`` (any positive number) shuffles the share anew
        each epoch (a full permutation of its rows, not a buffer), seeded by
        ``local_shuffle_seed`` (default: drawn once, and saved with the position).
        """
        if batch_format not in ("numpy", "default"):
            raise DatasetError(f"dataset {self.name!r}: batch_format={batch_format!r} is not "
                               "supported; pass batch_format='numpy' (dicts of NumPy arrays)")
        settings = self._settings(batch_size, drop_last, local_shuffle_buffer_size,
                                  local_shuffle_seed, prefetch_batches, "batch_size")
        return self._open(settings, None)

    def iter_jax_batches(self, global_batch_size: int, *, sharding: Any = None,
                         drop_last: bool = True, prefetch_batches: int = 1,
                         local_shuffle_buffer_size: int | None = None,
                         local_shuffle_seed: int | None = None) -> BatchIterator:
        """One epoch of dicts of global ``jax.Array``s of ``global_batch_size`` rows.

        ``sharding`` (default: the batch axis split over every device) lays out each
        column; each process puts its own rows (``jax.make_array_from_process_local_data``),
        in a background thread, ``prefetch_batches`` ahead.
        """
        import jax

        from jaxnb._engine.datasets import global_batches

        n = self.num_processes
        if not isinstance(global_batch_size, int) or global_batch_size <= 0 or global_batch_size % n:
            raise DatasetError(f"dataset {self.name!r}: global_batch_size={global_batch_size!r} "
                               f"must be a positive multiple of the number of processes ({n})")
        if sharding is None:
            sharding = global_batches.batch_sharding()
            if global_batch_size % jax.device_count():
                raise DatasetError(f"dataset {self.name!r}: global_batch_size={global_batch_size} "
                                   f"must be a multiple of the {jax.device_count()} devices it is "
                                   "split over; pass such a size, or a sharding=")
        settings = self._settings(global_batch_size // n, drop_last, local_shuffle_buffer_size,
                                  local_shuffle_seed, prefetch_batches, "global_batch_size")
        return self._open(settings, global_batches.ToGlobal(sharding, global_batch_size))

    # ---- internals ---------------------------------------------------------------------

    def _settings(self, batch_size: Any, drop_last: bool, shuffle: Any, seed: Any,
                  prefetch: Any, what: str) -> dict[str, Any]:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise DatasetError(f"dataset {self.name!r}: {what} must be a positive int, "
                               f"got {batch_size!r}")
        if batch_size > self.rows:
            n = self.num_processes
            asked, most = (f"batch_size={batch_size}", self.rows) if what == "batch_size" else \
                (f"global_batch_size={batch_size * n} ({batch_size} per process)", self.rows * n)
            raise DatasetError(
                f"dataset {self.name!r}: {asked} is larger than this process's share "
                f"({self.rows} of {self.source.length} rows over "
                f"{plural(n, 'process', 'processes')}); pass at most {most}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise DatasetError(f"dataset {self.name!r}: prefetch_batches must be an int >= 0, "
                               f"got {prefetch!r}")
        if shuffle is not None and seed is None:
            seed = cast(int, np.random.SeedSequence().entropy) % (1 << 32)
        return {"batch_size": batch_size, "drop_last": bool(drop_last),
                "shuffle_seed": None if shuffle is None else int(seed), "prefetch": prefetch}

    def _open(self, settings: dict[str, Any], to_device: Any) -> BatchIterator:
        if self.current is not None:
            self.current.close()
        state, taken = None, 0
        if self._resume is not None:
            saved, self._resume = self._resume, None
            settings, state = self._continue(saved, settings)
            self._epoch, taken = int(saved["epoch"]), int(saved["taken"])
            if taken >= saved["batches"]:  # that pass was read to its end: this is the next one
                state, taken, self._epoch = None, 0, self._epoch + 1
        else:
            self._epoch += 1
        self.current = BatchIterator(self, settings, self._epoch, state, to_device, taken)
        return self.current

    def _continue(self, saved: dict[str, Any], settings: dict[str, Any]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The saved pass's settings and position, when this pass asks for the same batches."""
        if saved.get("num_processes") != self.num_processes or saved.get("rows") != self.source.length:
            raise DatasetError(
                f"dataset {self.name!r} was saved with {saved.get('rows')} rows over "
                f"{saved.get('num_processes')} processes and now has {self.source.length} over "
                f"{self.num_processes}: its position cannot be carried over exactly; resume with the "
                "same dataset and number of processes, or start a new run "
                f"({example('name', 'new')})")
        for key in ("batch_size", "drop_last"):
            if saved[key] != settings[key]:
                raise DatasetError(
                    f"dataset {self.name!r} was saved in batches of {key}={saved[key]!r}, this run asks "
                    f"for {settings[key]!r}; pass the saved value to continue it exactly, or start a "
                    f"new run ({example('name', 'new')})")
        if (saved["shuffle_seed"] is None) != (settings["shuffle_seed"] is None):
            raise DatasetError(
                f"dataset {self.name!r} was saved {'un' if saved['shuffle_seed'] is None else ''}"
                "shuffled; pass the same local_shuffle_buffer_size as the saved run")
        return {**settings, "shuffle_seed": saved["shuffle_seed"]}, saved["state"]

    def batch_count(self, settings: dict[str, Any]) -> int:
        """Batches in one pass over this share (the same on every process)."""
        whole, rest = divmod(self.rows, settings["batch_size"])
        return whole + (1 if rest and not settings["drop_last"] else 0)

    def pipeline(self, settings: dict[str, Any], epoch: int, to_device: Any) -> Any:
        """The Grain iterator over one epoch of this share: batch b reads its rows at once."""
        p, n, rows, size = self.process, self.num_processes, self.rows, settings["batch_size"]
        order = None
        if settings["shuffle_seed"] is not None:  # a new permutation of the share each epoch
            order = np.random.default_rng([settings["shuffle_seed"], epoch]).permutation(rows)
        count = self.batch_count(settings)

        def rows_of(b: int) -> np.ndarray:
            at = np.arange(b * size, min((b + 1) * size, rows))
            return p + n * (at if order is None else order[at])

        ds = grain.MapDataset.range(count).map(rows_of).map(self.source.read)
        prefetch = settings["prefetch"]
        it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=min(prefetch, 4),
                                                     prefetch_buffer_size=prefetch))
        if to_device is not None:
            it_ds = it_ds.map(to_device)
            if prefetch:
                it_ds = grain.experimental.ThreadPrefetchIterDataset(
                    it_ds, prefetch_buffer_size=prefetch)
        return iter(it_ds)
