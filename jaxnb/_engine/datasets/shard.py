"""One process's share of a dataset, read in batches by a Grain pipeline (Ray's ``DataIterator``).

An epoch is a sequence of rows fixed when it begins, by the number of processes P then (its
*layout*): position s holds row ``p + P * order_p[s // P]``, p = s mod P, where ``order_p`` is
``0, 1, 2, …`` or, shuffled, a NumPy permutation of process p's share seeded by its seed and the
epoch. Each step takes the next G positions (G, the global batch) and process q of Q takes every
Q-th of them: with Q = P, process p reads rows p, p+P, p+2P, … of the first ``P * (N // P)``
rows, so every process has the same number of rows and batches per pass (an uneven remainder
would leave the others waiting in a collective; the last ``N mod P`` rows of each epoch are left
out). The position is the index of the next row of the sequence, the same on every process
(Grain's ``ElasticIterator`` model, read here a batch at a time: that iterator reads row by
row, about 50 µs a row), so a run resumed on another number of processes (``--min-processes``,
or ``--resume`` elsewhere) takes exactly the global batches that are left of the epoch — no row
repeated or skipped — split over the processes it has; the next epoch is laid out for them.

The global batch stays: ``iter_jax_batches(G)``'s G, or ``iter_batches(b)``'s b times the
number of processes the run's datasets were first read with; a loop that asks for
``global_batch // world_size`` rows per process continues exactly (:mod:`.batch_choice`).
Where the processes do not divide it, each takes ``G // Q`` rows (``iter_jax_batches``: a
multiple of its devices), said in one line, and the global batch is that much smaller while
they are Q; rows at the very end of an epoch that do not split over the processes are left out,
named (only after such a change).

The pipeline is Grain's: ``MapDataset.range`` over the batches → ``map`` (the batch's rows,
then one read of those rows, records collated there) → ``to_iter_dataset`` (the next batches
read and collated ahead by Grain's threads while the step runs; one thread for records),
and, for ``iter_jax_batches``, each batch put on the devices ``prefetch_batches`` ahead, on the
training thread (JAX's transfers are asynchronous: a second thread would only contend with the
training loop for the interpreter, as bench/datasets.py measured).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from typing import Any, cast

import grain
import numpy as np

from jaxnb._core.messages import plural
from jaxnb._core.spelling import example
from jaxnb._engine.datasets import batch_choice
from jaxnb._engine.datasets.source import DatasetError, Source
from jaxnb._engine.run import timing

UNEVEN = ("jaxnb: dataset {name!r}: the global batch of {g} rows does not split over "
          "{processes}: each takes {each} (a global batch of {taken}) while they are {q}")
CUT = ("jaxnb: dataset {name!r}: left out the last {cut} of epoch {epoch} (rows that do not split "
       "over {processes})")


class Pass:
    """Which rows one pass over the rest of an epoch reads, on process q of Q (pure NumPy)."""

    def __init__(self, rows: int, layout: dict[str, Any], epoch: int, start: int, q: int,
                 processes: int, each: int, drop_last: bool, own_seed: int | None) -> None:
        self.layout_processes = int(layout["processes"])
        #: Each layout process's shuffle seed; ``None``: unshuffled, or only this process's own
        #: share is read (``own_seed``: the layout is this run's processes, as they are).
        self.seeds: list[Any] | None = layout["seeds"]
        self.own_seed = own_seed
        self.share = rows // self.layout_processes
        self.length = self.share * self.layout_processes
        self.epoch, self.start, self.q, self.processes, self.each = epoch, start, q, processes, each
        window = processes * each
        self.full = max(self.length - start, 0) // window
        rest = max(self.length - start - self.full * window, 0)
        self.tail = 0 if drop_last else rest // processes
        self.cut = 0 if drop_last else rest - self.tail * processes
        self._orders: dict[int, np.ndarray] = {}

    @property
    def batches(self) -> int:
        return self.full + (1 if self.tail else 0)

    def next_index(self, taken: int) -> int:
        """The sequence's next position once ``taken`` batches of this pass were read."""
        if taken <= self.full:
            return self.start + taken * self.processes * self.each
        return self.length

    def rows_of(self, b: int) -> np.ndarray:
        """Row indices of batch ``b`` of this process."""
        if b < self.full:
            at = self.start + b * self.processes * self.each
            return self.rows_at(at + self.q + self.processes * np.arange(self.each))
        at = self.start + self.full * self.processes * self.each
        return self.rows_at(at + self.q + self.processes * np.arange(self.tail))

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` of the epoch's sequence."""
        p, a = positions % self.layout_processes, positions // self.layout_processes
        if self.seeds is None and self.own_seed is None:
            return p + self.layout_processes * a
        out = np.empty_like(positions)
        for owner in np.unique(p):
            mine = p == owner
            out[mine] = owner + self.layout_processes * self._order(int(owner))[a[mine]]
        return out

    def _order(self, owner: int) -> np.ndarray:
        if owner not in self._orders:
            seed = self.own_seed if self.seeds is None else self.seeds[owner]
            assert seed is not None  # shuffled: every layout process has its seed
            if self.seeds is None and owner != self.q:  # a layout of other processes: see _open
                raise DatasetError(f"process {owner}'s shuffle seed is unknown here")
            self._orders[owner] = np.random.default_rng([seed, self.epoch]).permutation(self.share)
        return self._orders[owner]


class BatchIterator(Iterator[dict[str, Any]]):
    """One pass over the rest of an epoch: batches, and the position after the last one taken."""

    def __init__(self, shard: DatasetShard, settings: dict[str, Any], part: Pass,
                 to_device: Any = None, taken: int = 0) -> None:
        self.shard, self.settings, self.part = shard, settings, part
        self.epoch, self.batches, self.taken, self._read = part.epoch, part.batches, taken, 0
        self._it: Any = shard.pipeline(settings, part)
        self._to_device = to_device
        #: Batches already put on the devices, oldest first (``iter_jax_batches``).
        self._ahead: collections.deque[dict[str, Any]] = collections.deque()
        self._ahead_count = int(settings["prefetch"])

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            raise StopIteration
        try:
            with timing.counting("data"):  # the run waits for its next batch
                batch = self._next_on_devices() if self._to_device is not None else next(self._it)
        except StopIteration:
            self.close()
            raise
        self.taken, self._read = self.taken + 1, self._read + 1
        return batch

    def _next_on_devices(self) -> dict[str, Any]:
        """The oldest batch put on the devices, after putting the next ones (asynchronously)."""
        while self._it is not None and len(self._ahead) <= self._ahead_count:
            try:
                self._ahead.append(self._to_device(next(self._it)))
            except StopIteration:
                break
        if not self._ahead:
            raise StopIteration
        return self._ahead.popleft()

    def position(self) -> dict[str, Any]:
        """Where the next batch comes from (JSON): the epoch, its layout, its next position."""
        return {"epoch": self.epoch, "next": self.part.next_index(self._read), "taken": self.taken,
                "batches": self.batches, **self.settings,
                "layout": {"processes": self.part.layout_processes, "seeds": self.part.seeds},
                "reference_processes": self.shard.reference,
                "num_processes": self.shard.num_processes, "rows": self.shard.source.length}

    def close(self) -> None:
        """Stop the reading threads (done at the end of the pass, and of the run)."""
        it, self._it = self._it, None
        self._ahead.clear()
        if it is not None:
            it.close()


class DatasetShard:
    """This process's share of dataset ``name`` (from ``jaxnb.get_dataset_shard(name)``)."""

    def __init__(self, source: Source, process: int, num_processes: int,
                 resume: dict[str, Any] | None = None) -> None:
        self.source, self.name = source, source.name
        self.process, self.num_processes = process, num_processes
        self.rows = source.length // num_processes
        self._resume = resume
        #: How many processes the run's datasets were first read with; ``iter_batches``'s
        #: ``batch_size`` is per process at that number (the global batch stays).
        self.reference = int(resume.get("reference_processes", num_processes)) if resume else num_processes
        self._epoch = -1
        self._said: set[str] = set()
        self.current: BatchIterator | None = None

    def __repr__(self) -> str:
        return (f"<DatasetShard {self.name!r}: {self.rows} rows on process {self.process} of "
                f"{self.num_processes}>")

    def count(self) -> int:
        """Rows in this process's share of an epoch (every process has as many)."""
        return self.rows

    # ---- Ray's DataIterator ------------------------------------------------------------

    def iter_batches(self, *, batch_size: int = 256, batch_format: str = "numpy",
                     prefetch_batches: int = 1, drop_last: bool = False,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> BatchIterator:
        """One epoch of dicts of NumPy arrays, ``batch_size`` rows of this process each.

        ``local_shuffle_buffer_size`` (any positive number) shuffles the share anew
        each epoch (a full permutation of its rows, not a buffer), seeded by
        ``local_shuffle_seed`` (default: drawn once, and saved with the position). After the
        number of processes changed, each takes the same global batch's share (see above).
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
        ``prefetch_batches`` ahead (rows read by Grain's threads; the transfers asynchronous).
        """
        import jax

        from jaxnb._engine.datasets import global_batches

        n, resized = self.num_processes, self.num_processes != self.reference
        if not isinstance(global_batch_size, int) or global_batch_size <= 0 or (
                global_batch_size % n and not resized):
            raise DatasetError(f"dataset {self.name!r}: global_batch_size={global_batch_size!r} "
                               f"must be a positive multiple of the number of processes ({n})")
        unit = 1
        if sharding is None:
            sharding, unit = global_batches.batch_sharding(), jax.local_device_count()
            if global_batch_size % jax.device_count() and not resized:
                raise DatasetError(f"dataset {self.name!r}: global_batch_size={global_batch_size} "
                                   f"must be a multiple of the {jax.device_count()} devices it is "
                                   "split over; pass such a size, or a sharding=")
        settings = self._settings(global_batch_size, drop_last, local_shuffle_buffer_size,
                                  local_shuffle_seed, prefetch_batches, "global_batch_size", unit)
        each = settings["each"]
        return self._open(settings, global_batches.ToGlobal(sharding, each * n))

    # ---- internals ---------------------------------------------------------------------

    def _settings(self, asked: Any, drop_last: bool, shuffle: Any, seed: Any,
                  prefetch: Any, what: str, unit: int = 1) -> dict[str, Any]:
        if isinstance(asked, bool) or not isinstance(asked, int) or asked <= 0:
            raise DatasetError(f"dataset {self.name!r}: {what} must be a positive int, got {asked!r}")
        n = self.num_processes
        total = asked * self.reference if what == "batch_size" else asked
        each = total // n // unit * unit
        chosen = batch_choice.per_process(self.name, asked, n, self._resume) if what == "batch_size" \
            else None
        if chosen is not None:  # the processes changed: the loop's batch, or the global batch kept
            (each, line), total = chosen, batch_choice.saved_global(cast(dict, self._resume))
            if line:
                self._note(line)
        if each > self.rows or each == 0:
            shown = f"batch_size={asked}" if what == "batch_size" else \
                f"global_batch_size={asked} ({each} per process)"
            raise DatasetError(
                f"dataset {self.name!r}: {shown} is {'larger than' if each else 'no rows of'} "
                "this process's share "
                f"({self.rows} of {self.source.length} rows over {plural(n, 'process', 'processes')}); "
                f"pass at most {self.rows if what == 'batch_size' else self.rows * n}")
        if each * n != total:
            self._note(UNEVEN.format(name=self.name, g=total, processes=plural(n, "process", "processes"),
                                     each=each, taken=each * n, q=n))
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise DatasetError(f"dataset {self.name!r}: prefetch_batches must be an int >= 0, "
                               f"got {prefetch!r}")
        if shuffle is not None and seed is None:
            seed = cast(int, np.random.SeedSequence().entropy) % (1 << 32)
        return {"batch_size": asked, "what": what, "each": each, "drop_last": bool(drop_last),
                "shuffle_seed": None if shuffle is None else int(seed), "prefetch": prefetch}

    def _open(self, settings: dict[str, Any], to_device: Any) -> BatchIterator:
        if self.current is not None:
            self.current.close()
        start, taken = 0, 0
        layout: dict[str, Any] = {"processes": self.num_processes, "seeds": None}
        if self._resume is not None:
            saved, self._resume = self._resume, None
            settings = self._continue(saved, settings)
            self._epoch, layout, start, taken = (int(saved["epoch"]), saved["layout"],
                                                 int(saved["next"]), int(saved["taken"]))
            if self._pass(settings, layout, start).batches == 0:  # that pass was read to its end
                layout, start, taken, self._epoch = {"processes": self.num_processes, "seeds": None}, \
                    0, 0, self._epoch + 1
        else:
            self._epoch += 1
        if layout["seeds"] is None and settings["shuffle_seed"] is not None and \
                layout["processes"] != self.num_processes:
            raise DatasetError(f"dataset {self.name!r}: the shuffle seeds of the processes that "
                               "began this epoch were not saved with it; start a new run "
                               f"({example('name', 'new')})")
        part = self._pass(settings, layout, start)
        if part.cut:
            self._note(CUT.format(name=self.name, cut=plural(part.cut, "row"), epoch=self._epoch,
                                  processes=plural(self.num_processes, "process", "processes")))
        self.current = BatchIterator(self, settings, part, to_device, taken)
        return self.current

    def _pass(self, settings: dict[str, Any], layout: dict[str, Any], start: int) -> Pass:
        return Pass(self.source.length, layout, self._epoch, start, self.process, self.num_processes,
                    settings["each"], settings["drop_last"], settings["shuffle_seed"])

    def _note(self, line: str) -> None:
        """Print ``line`` once (on every process alike: the notebook shows it once)."""
        if line not in self._said:
            self._said.add(line)
            print(line, file=sys.stderr)

    def _continue(self, saved: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
        """The saved pass's settings, when this pass asks for the same batches."""
        if saved.get("rows") != self.source.length or "layout" not in saved:
            raise DatasetError(
                f"dataset {self.name!r} was saved with {saved.get('rows')} rows and now has "
                f"{self.source.length}: its position cannot be carried over exactly; resume with "
                f"the same dataset, or start a new run ({example('name', 'new')})")
        resized = saved["what"] == settings["what"] == "batch_size" and \
            int(saved.get("num_processes", self.num_processes)) != self.num_processes
        keys = ("drop_last",) if resized else ("batch_size", "drop_last")  # see batch_choice
        asked = [(k, saved[k], settings[k]) for k in keys
                 if saved[k] != settings[k] or saved["what"] != settings["what"]]
        if asked:
            key, was, now = asked[0]
            name = saved["what"] if key == "batch_size" else key
            raise DatasetError(
                f"dataset {self.name!r} was saved in batches of {name}={was!r}, this run asks for "
                f"{settings['what'] if key == 'batch_size' else key}={now!r}; pass the saved value "
                f"to continue it exactly, or start a new run ({example('name', 'new')})")
        if (saved["shuffle_seed"] is None) != (settings["shuffle_seed"] is None):
            raise DatasetError(
                f"dataset {self.name!r} was saved {'un' if saved['shuffle_seed'] is None else ''}"
                "shuffled; pass the same local_shuffle_buffer_size as the saved run")
        return {**settings, "shuffle_seed": saved["shuffle_seed"]}

    def pipeline(self, settings: dict[str, Any], part: Pass) -> Any:
        """The Grain iterator over the pass: batch b reads its rows at once."""
        ds = grain.MapDataset.range(part.batches).map(part.rows_of).map(self.source.read)
        prefetch = settings["prefetch"]
        threads = min(prefetch, 1 if self.source.records else 4)  # see Source
        it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads,
                                                     prefetch_buffer_size=prefetch))
        return iter(it_ds)
