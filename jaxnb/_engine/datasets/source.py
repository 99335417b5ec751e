"""What a dataset passed with ``--datasets`` is, and how a batch of its rows is read.

Accepted: a Grain ``MapDataset``, any random-access source (``len()`` and ``[i]``
giving a dict of arrays), a dict of equal-length arrays (columns) or a NumPy array
(``np.memmap`` included; its rows come as the column ``"data"``, as Ray's
``from_numpy``). Columns are read a batch at a time by one NumPy indexing; records
a batch at a time where the source can (``__getitems__``, as PyTorch and Hugging Face
datasets have, or a Grain ``MapDataset``'s batched read), else one by one; then stacked.
No JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

KINDS = (
    "a Grain MapDataset, a random-access source (len() and [i] giving a dict of arrays), "
    "a dict of equal-length arrays or a NumPy array"
)
#: Lengths above this are an endless dataset (a repeated Grain MapDataset).
ENDLESS = 1 << 62


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names it and says what to pass."""


class Source:
    """A dataset's length and a reader of rows by index (``read(indices) -> dict of arrays``).

    ``records``: its rows are Python records, collated in Python: a read holds the interpreter
    throughout, so one reading thread is enough (a second would only contend with the training
    loop for the interpreter)."""

    def __init__(self, name: str, length: int, read: Callable[[np.ndarray], dict[str, np.ndarray]],
                 records: bool = False):
        self.name, self.length, self.read, self.records = name, length, read, records


def source_of(name: str, dataset: Any, label: str = "") -> Source:
    """The :class:`Source` for ``dataset``, or :class:`DatasetError` saying what to pass."""
    shown = f"dataset {name!r}" + (f" ({label})" if label and label != name else "")
    if isinstance(dataset, np.ndarray):
        if dataset.ndim == 0:
            raise DatasetError(f"{shown} is a 0-d NumPy array; pass an array with rows, or {KINDS}")
        return Source(name, len(dataset), lambda idx: {"data": np.asarray(dataset[idx])})
    if isinstance(dataset, Mapping):
        return _columns(shown, name, dataset)
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or isinstance(
            dataset, str | bytes):
        raise DatasetError(f"{shown} is a {_type(dataset)}; pass {KINDS}")
    try:
        length = len(dataset)
    except TypeError as exc:
        raise DatasetError(f"{shown} has no length ({exc}); pass {KINDS}") from None
    if length >= ENDLESS:
        raise DatasetError(f"{shown} is endless (a repeated dataset?); pass it without .repeat(): "
                           "each iter_batches() pass is one epoch")
    many = batch_reader(dataset)
    if many is not None:
        return Source(name, length, lambda idx: stack(shown, list(many(idx.tolist()))), True)
    return Source(name, length, lambda idx: stack(shown, [dataset[i] for i in idx.tolist()]), True)


def batch_reader(dataset: Any) -> Callable[[list[int]], Any] | None:
    """``dataset``'s read of a batch of indices in one call, or None (read record by record)."""
    many = getattr(type(dataset), "__getitems__", None)
    if callable(many):
        return lambda indices: many(dataset, indices)
    from jaxnb._engine.datasets import grain_internals

    return grain_internals.batch_reader(dataset)


def _columns(shown: str, name: str, columns: Mapping[Any, Any]) -> Source:
    if not columns:
        raise DatasetError(f"{shown} is an empty dict; pass a dict of equal-length arrays")
    arrays = {}
    for key, value in columns.items():
        if not isinstance(key, str):
            raise DatasetError(f"{shown} has a column named {key!r}; name its columns with strings")
        if not hasattr(value, "__getitem__") or not hasattr(value, "shape"):
            value = np.asarray(value)
        if np.ndim(value) == 0 or value.dtype == object:
            raise DatasetError(f"{shown}: column {key!r} is not an array of rows "
                               f"({_type(value)}); pass a dict of equal-length arrays")
        arrays[key] = value
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown_lengths = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        raise DatasetError(f"{shown}: its columns differ in length ({shown_lengths}); "
                           "pass columns of equal length")
    length = next(iter(lengths.values()))
    return Source(name, length, lambda idx: {k: np.asarray(v[idx]) for k, v in arrays.items()})


def stack(shown: str, records: list[Any]) -> dict[str, np.ndarray]:
    """Records (dicts of arrays or scalars, the same keys) as one dict of stacked arrays: each
    column allocated once, then filled row by row (a few times faster than ``np.stack`` of
    the rows for the small batches of a training loop)."""
    first = records[0]
    if not isinstance(first, Mapping):
        raise DatasetError(f"{shown}: its records are {_type(first)}s, not dicts of arrays; make "
                           "each record a dict such as {'x': array, 'y': array}")
    try:
        columns = {}
        for key in first:
            rows = [record[key] for record in records]
            kind = getattr(rows[0], "dtype", None)
            shape = np.shape(rows[0])
            if kind is not None and all(getattr(r, "dtype", None) == kind and np.shape(r) == shape
                                        for r in rows):
                column = np.empty((len(rows), *shape), kind)
                for i, row in enumerate(rows):
                    column[i] = row
            else:  # Python scalars, or dtypes to promote: NumPy's rules
                column = np.stack([np.asarray(r) for r in rows])
            columns[key] = column
        return columns
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{shown}: its records cannot be stacked into a batch "
                           f"({type(exc).__name__}: {exc}); give every record the same keys "
                           "and array shapes") from None


def _type(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
