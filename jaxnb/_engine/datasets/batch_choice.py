"""After the number of processes changed: which per-process batch ``iter_batches`` reads, and the
line that says so (pure logic).

A run's dataset positions count rows of the epoch's sequence, not batches, so a pass can go on
from a saved position with any batch that reads the same global batches. On Q processes, with
the run saved in global batches of G (P processes × b), ``iter_batches(batch_size=a)``:

- ``a == b`` (the loop asks what it asked before): jaxnb keeps the global batch, each process
  takes ``G // Q`` rows, and one line says so (the loop asked for b, it gets more or fewer);
- ``a * Q == G`` (Ray's ``global_batch // world_size``): each takes a, the global batches go on
  exactly as before, said in one line;
- anything else reads other global batches than the saved run: refused in one line naming the
  exact choice (``batch_size=G // Q``), or, where G does not split over Q, the saved batch
  (jaxnb then takes ``G // Q`` each and says so).
"""

from __future__ import annotations

from typing import Any

from jaxnb._core.messages import plural
from jaxnb._core.spelling import example
from jaxnb._engine.datasets.source import DatasetError

KEPT = ("jaxnb: dataset {name!r}: batch_size={asked} asked on {processes}; each takes {each} to keep "
        "the global batch of {g} rows (saved on {before}); pass batch_size=global_batch // "
        "world_size to choose the per-process batch yourself")
EXACT = ("jaxnb: dataset {name!r}: batch_size={asked} on {processes} continues the global batch of "
         "{g} rows exactly (saved as {was} on {before})")


def saved_global(saved: dict[str, Any]) -> int:
    """The global batch a saved position was read in (rows per step, every process together)."""
    return int(saved["each"]) * int(saved["num_processes"])


def per_process(name: str, asked: int, n: int, saved: dict[str, Any] | None) -> tuple[int, str] | None:
    """``iter_batches(batch_size=asked)`` on ``n`` processes resumed from ``saved``: the rows each
    takes and the line that says it ("": shard's own line does), or ``None`` where the number of
    processes did not change (or nothing was saved: the batch is the loop's). A
    :class:`DatasetError` where the loop's batch cannot continue the saved global batches."""
    if saved is None or saved.get("what") != "batch_size" or "each" not in saved:
        return None
    before = int(saved["num_processes"])
    if before == n:
        return None
    g, was = saved_global(saved), int(saved["batch_size"])
    procs, procs_before = plural(n, "process", "processes"), plural(before, "process", "processes")
    if asked * n == g:
        return asked, EXACT.format(name=name, asked=asked, processes=procs, g=g,
                                   was=f"batch_size={was}", before=procs_before)
    if asked == was:  # where g does not split over n, shard's UNEVEN line says what is kept
        each = g // n
        return each, "" if g % n else KEPT.format(name=name, asked=asked, processes=procs, each=each,
                                                  g=g, before=procs_before)
    exact = (f"pass batch_size={g // n} ({g} // {n}) to continue it exactly" if g % n == 0 else
             f"the global batch does not split over {procs}: pass batch_size={was} and each "
             f"takes {g // n}")
    raise DatasetError(
        f"dataset {name!r} was saved in global batches of {g} rows (batch_size={was} on "
        f"{procs_before}); batch_size={asked} on {procs} reads {asked * n}, which cannot "
        f"continue it exactly; {exact}, or start a new run ({example('name', 'new')})")
