"""How a message names an option: as the Python keyword (``trials=``) or as the magic's flag
(``--trials``).

One check serves ``JaxCluster.tune(fn, space, trials=0)`` and ``%jax_tune fn --trials 0``; its
message says ``trials=`` to the first and ``--trials`` to the second. The magics call the
Python API inside :func:`as_flags`; everywhere else messages name the keywords. A thread that
runs a background run with ``contextvars.copy_context()`` keeps the spelling of its caller.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_AS_FLAGS: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxnb_as_flags", default=False)

#: Keywords whose flag is not ``--`` and the keyword with dashes (``max_failures``: ``--max-failures``).
FLAG_OF = {"n": "-n", "init": "--no-init", "commands": "-c"}


class Code(str):
    """Python source that an example shows as is (``config=dict(steps=100)``), not as a string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def flag_of(keyword: str) -> str:
    """The magics' flag for the Python keyword ``keyword``."""
    return FLAG_OF.get(keyword) or "--" + keyword.replace("_", "-")


def option(keyword: str) -> str:
    """``trials=``, or ``--trials`` inside a magic."""
    return flag_of(keyword) if _AS_FLAGS.get() else f"{keyword}="


def bare(keyword: str) -> str:
    """``space``, or ``--space`` inside a magic (for ``space['lr']``)."""
    return flag_of(keyword) if _AS_FLAGS.get() else keyword


def example(keyword: str, value: object, text: str | None = None) -> str:
    """``trials=20``, or ``--trials 20`` inside a magic.

    ``text`` is the flag's own text for ``value`` where it differs from ``str(value)``
    (``datasets={'train': 'train_ds'}`` is ``--datasets train=train_ds``). A flag that takes
    no value stands alone (``resume=True`` is ``--resume``, ``init=False`` is ``--no-init``);
    a value that starts with ``-`` follows an ``=`` (``--sbatch=--gres=gpu:8``).
    """
    if not _AS_FLAGS.get():
        return f"{keyword}={value!r}"
    if isinstance(value, bool):
        return flag_of(keyword)
    shown = str(value) if text is None else text
    return f"{flag_of(keyword)}{'=' if shown.startswith('-') else ' '}{shown}"


def active() -> bool:
    """Whether messages made now name the magics' flags (a magic is calling)."""
    return _AS_FLAGS.get()


@contextlib.contextmanager
def spelled(flags: bool) -> Iterator[None]:
    """Messages made inside name flags when ``flags`` (an engine told how its caller spells)."""
    token = _AS_FLAGS.set(flags)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)


@contextlib.contextmanager
def as_flags() -> Iterator[None]:
    """Messages made inside name the magics' flags (a magic calls the Python API in this)."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)
