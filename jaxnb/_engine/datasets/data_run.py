"""``jaxnb.get_dataset_shard(name)``: the datasets of a run, and where their iterators stand.

``%jax_train FUNC --datasets train=train_ds`` names engine-side variables; each
process looks them up when the run is prepared. A checkpoint that jaxnb saves (a pytree)
holds every process's positions in the step itself, committed with it
(:func:`jaxnb._engine.checkpoint.load.saved_positions`). Every report made while a
dataset iterator is open also appends the position of each dataset's latest
iterator to this process's ``RUN/datasets/process_<i>.jsonl`` (a few hundred
bytes; the file keeps the recent reports; a line that carries a checkpoint is on disk,
fsynced, before the report leaves the process): that log is what a directory the user
saved himself resumes from. ``--resume`` from step S gives each dataset's first iterator
the position saved at step S (for a directory, the report that carried it, or any report at
step S when this process did not carry it, as in Ray loops where only rank 0 reports the
directory), so the resumed run gets exactly the batches an uninterrupted run would have; on
another number of processes, the global batches left of the epoch, split over the processes it
has (:mod:`.shard`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from jaxnb._core.run_folder import Checkpoint
from jaxnb._core.safe_files import open_text, write_whole

#: The positions file is rewritten with its last ``KEEP_LINES`` lines when it grows past
#: ``MAX_LINES`` (a resume looks only at the step it resumes from).
MAX_LINES, KEEP_LINES = 4096, 512

NO_POSITION = (
    "jaxnb: dataset {name!r} has no position saved with the checkpoint of step {step} (saved "
    "before its first iterator opened, or by a run without --datasets): its batches start again "
    "from the beginning of an epoch")
OUTSIDE_RUN = (
    "jaxnb.get_dataset_shard() works only inside a function run by `%jax_train FUNC --datasets "
    "NAME=VAR` (or `JaxCluster.train(fn, datasets={'NAME': 'VAR'})`)"
)


class DataRun:
    """The datasets passed to one run on this process, their shards and their positions log."""

    def __init__(self, datasets: dict[str, tuple[str, Any]], run_dir: str, process: int,
                 num_processes: int, resume: dict[str, Any] | None, resume_step: int | None = None
                 ) -> None:
        self.datasets, self.process, self.num_processes = datasets, process, num_processes
        self.resume = resume or {}
        self.resume_step = resume_step if resume is not None else None
        self.shards: dict[str, Any] = {}
        self.run_dir = run_dir
        self.path = positions_file(run_dir, process)  # in RUN/datasets, made without links
        self._log = open_text(self.path, "a" if resume is not None else "w", run_dir)
        self._lines = len(_entries(self.path)) if resume is not None else 0
        if self._log.tell() and not _ends_a_line(self.path):
            self._log.write("\n")  # a line cut short by a crash stays alone (and unread)

    def shard(self, name: str) -> Any:
        if name not in self.datasets:
            passed = ", ".join(self.datasets) or "none"
            raise KeyError(
                f"get_dataset_shard({name!r}): no dataset named {name!r} was passed to this run "
                f"(passed: {passed}); add --datasets {name}=VAR to %jax_train, or "
                f"datasets={{{name!r}: 'VAR'}} to JaxCluster.train")
        if name not in self.shards:
            from jaxnb._engine.datasets.shard import DatasetShard
            from jaxnb._engine.datasets.source import source_of

            label, value = self.datasets[name]
            source = source_of(name, value, label)
            if self.resume_step is not None and name not in self.resume:  # merged into one line
                print(NO_POSITION.format(name=name, step=self.resume_step), file=sys.stderr)
            self.shards[name] = DatasetShard(source, self.process, self.num_processes,
                                             self.resume.get(name))
        return self.shards[name]

    def positions(self) -> dict[str, Any]:
        """The position of each dataset's latest iterator (JSON)."""
        return {name: shard.current.position() for name, shard in self.shards.items()
                if shard.current is not None}

    def record(self, step: int, checkpoint: bool) -> dict[str, Any]:
        """Note where every open iterator stands at the report of ``step``; those positions.

        A report that carries a checkpoint has its line fsynced before it returns."""
        positions = self.positions()
        if not positions:
            return positions
        line = json.dumps({"step": step, "checkpoint": checkpoint,
                           "num_processes": self.num_processes, "positions": positions})
        self._log.write(line + "\n")
        self._log.flush()
        if checkpoint:
            os.fsync(self._log.fileno())
        self._lines += 1
        if self._lines > MAX_LINES:
            self._trim()
        return positions

    def _trim(self) -> None:
        self._log.close()
        with open(self.path) as f:
            lines = f.readlines()[-KEEP_LINES:]
        write_whole(self.path, "".join(lines).encode(), within=self.run_dir)
        self._log, self._lines = open_text(self.path, "a", self.run_dir), len(lines)

    def close(self) -> None:
        for shard in self.shards.values():
            if shard.current is not None:
                shard.current.close()
        self._log.close()


_data: DataRun | None = None


def get_dataset_shard(name: str) -> Any:
    """This process's share of the dataset passed as ``--datasets name=VAR``, as Ray's
    ``ray.train.get_dataset_shard``: ``iter_batches(...)`` and ``iter_jax_batches(...)``.

    Args:
        name: the dataset's name in ``--datasets name=VAR`` (``datasets={name: "VAR"}``).

    Raises:
        RuntimeError: called outside a function run by ``%jax_train`` / ``JaxCluster.train``.
        KeyError: no dataset of that name was passed to this run.

    Example:
        >>> for batch in jaxnb.get_dataset_shard("train").iter_batches(batch_size=8):  # doctest: +SKIP
        ...     state, loss = step(state, batch)
    """
    if _data is None:
        raise RuntimeError(OUTSIDE_RUN)
    return _data.shard(name)


# ---- set up and end a run (called by reporting.prepare / execute) ------------------------


def resolve(names: Mapping[str, str], namespace: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Each dataset's variable in the engine namespace; ``LookupError`` naming a missing one."""
    found = {}
    for name, var in names.items():
        head, *rest = var.split(".")
        if head not in namespace:
            raise LookupError(
                f"dataset {name!r}: {var!r} is not defined on the engines; build it in a "
                f"%%jax_cluster cell first (every process needs its own), then --datasets {name}={var}")
        value = namespace[head]
        for part in rest:
            value = getattr(value, part)
        found[name] = (var, value)
    return found


def start(datasets: dict[str, tuple[str, Any]], run_dir: str, process: int, num_processes: int,
          resume: Checkpoint | None) -> None:
    """Make the datasets of the run being prepared available to ``get_dataset_shard``."""
    global _data
    end()
    if not datasets:
        return
    positions = None
    if resume is not None:
        positions = saved_positions(resume, run_dir, process, num_processes)
    from jaxnb._engine.datasets.source import source_of

    for name, (label, value) in datasets.items():
        source_of(name, value, label)  # an unusable dataset is refused before the run starts
    _data = DataRun(datasets, run_dir, process, num_processes, positions,
                    resume.step if resume is not None else None)


def record(step: int, checkpoint: bool) -> dict[str, Any] | None:
    """At every report: note the open iterators' positions; None in a run without datasets."""
    return _data.record(step, checkpoint) if _data is not None else None


def end() -> None:
    """Stop the run's reading threads and close its positions log."""
    global _data
    data, _data = _data, None
    if data is not None:
        data.close()


# ---- the positions files ------------------------------------------------------------------


def positions_file(run_dir: str, process: int) -> str:
    return os.path.join(run_dir, "datasets", f"process_{process}.jsonl")


def _entries(path: str) -> list[dict[str, Any]]:
    """The log's whole lines (one cut short by a crash is left out)."""
    entries = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return [e for e in entries if isinstance(e, dict)]


def _ends_a_line(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def saved_positions(resume: Checkpoint, run_dir: str, process: int, num_processes: int
                    ) -> dict[str, Any]:
    """The positions this process resumes from with checkpoint ``resume`` (``{}``: none saved):
    from the checkpoint's own step when jaxnb saved it (every process's), else from the logs."""
    if not resume.user_managed:
        from jaxnb._engine.checkpoint.load import saved_positions as in_step

        saved = in_step(resume.path)
        if saved is not None:
            every = saved["positions"]
            return _carried(lambda p: every[p] if p < len(every) else None,
                            int(saved["num_processes"]), process, num_processes)
    return logged_positions(run_dir, process, num_processes, resume.step)


def logged_positions(run_dir: str, process: int, num_processes: int, step: int) -> dict[str, Any]:
    """The positions this process resumes from at ``step``, from the positions logs (``{}``:
    none logged)."""
    def positions_of(p: int) -> dict[str, Any] | None:
        entry = _at(run_dir, p, step)
        return None if entry is None else entry["positions"]

    entry = _at(run_dir, 0, step) or _at(run_dir, process, step)
    saved_n = int(entry.get("num_processes", 0)) if entry else 0
    return _carried(positions_of, saved_n, process, num_processes)


def _carried(positions_of: Any, saved_n: int, process: int, num_processes: int) -> dict[str, Any]:
    """This process's positions among those ``saved_n`` processes saved (``positions_of(p)``).

    Its own; on a process the saved run did not have, process 0's (every process is at the same
    place of an epoch). When the number of processes changed, each epoch's layout gets the
    shuffle seed of every process that began it (they read one another's shares now).
    """
    mine = positions_of(process) if process < saved_n else None
    if mine is None:
        mine = positions_of(0)
    if mine is None:
        return {}
    if saved_n == num_processes:
        return mine
    positions = json.loads(json.dumps(mine))
    for name, position in positions.items():
        layout = position.get("layout")
        if layout and layout["seeds"] is None and position.get("shuffle_seed") is not None:
            every = [positions_of(p) for p in range(int(layout["processes"]))]
            seeds = [e.get(name, {}).get("shuffle_seed") if e else None for e in every]
            layout["seeds"] = None if None in seeds else seeds
    return positions


def _at(run_dir: str, process: int, step: int) -> dict[str, Any] | None:
    """The entry ``process`` logged with the checkpoint of ``step`` (any report at the step when
    it did not carry the checkpoint), or None."""
    found = [e for e in _entries(positions_file(run_dir, process)) if e.get("step") == step]
    chosen = [e for e in found if e.get("checkpoint")] or found
    return chosen[-1] if chosen else None
