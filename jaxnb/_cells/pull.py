"""``%jax_pull`` / ``%jax_push``: values between the notebook and the engines."""

from __future__ import annotations

import sys
from typing import Any

from jaxnb._core.contract import MISSING, EngineCall
from jaxnb._core.messages import plural
from jaxnb._core.state import Group

_FETCH = EngineCall("jaxnb._engine.run.values:fetch")
#: A value this big (bytes, pickled) sent to the engines is named with its size, once.
LARGE_BYTES = 100 * 2**20
CANNOT_PULL = (
    "%jax_pull {name}: its value on process 0 cannot be sent to the notebook ({error}); "
    "pull what it holds instead (arrays, numbers, strings, lists, dicts)"
)
CANNOT_PUSH = (
    "%jax_push {name}: it cannot be sent to the engines ({error}); push what it holds instead, "
    "or create it on the engines in a %%jax_cluster cell"
)
LARGE = "jaxnb: {what} is {size} pickled; it is sent to each of the {processes}"


def pull(group: Group, name: str, timeout: float) -> Any:
    """The value of ``name`` on the engines: process 0's, a global array gathered as NumPy.

    A value that cannot be pickled raises ``ValueError`` (one line), as any other error
    on the engines raises :class:`jaxnb.RemoteError`.
    """
    import ipyparallel as ipp

    from jaxnb._core.errors import remote_error

    ar = group.view.apply_async(_FETCH, name)
    try:
        replies = ar.get(timeout=timeout)
    except ipp.error.CompositeError as exc:
        errors = [ipp.error.RemoteError(*e) for e in exc.elist]
        if all(_unpicklable(e) for e in errors):
            raise ValueError(CANNOT_PULL.format(name=name, error=_first(errors[0]))) from None
        raise remote_error(dict(enumerate(errors))) from None
    return choose(name, replies)


def _unpicklable(error: Any) -> bool:
    text = f"{error.ename}: {error.evalue}".lower()
    return "pickl" in text or "serializ" in text


def _first(error: Any) -> str:
    return f"{error.ename}: {str(error.evalue).strip().splitlines()[0] if error.evalue else ''}"


def human_size(size: int) -> str:
    """``200.0 MB``."""
    return f"{size / 1e6:,.1f} MB"


def note_size(what: str, size: int, processes: int) -> None:
    """Say once that a large value goes to the engines (stderr)."""
    if size >= LARGE_BYTES:
        print(LARGE.format(what=what, size=human_size(size),
                           processes=plural(processes, "process", "processes")), file=sys.stderr)


def choose(name: str, replies: list[Any]) -> Any:
    """Pick process 0's reply, or explain why there is none."""
    missing = [i for i, r in enumerate(replies) if isinstance(r, str) and r == MISSING]
    if len(missing) == len(replies):
        raise NameError(
            f"name {name!r} is not defined on any process; define it in a %%jax_cluster cell first"
        )
    if missing and missing[0] == 0:
        have = [i for i in range(len(replies)) if i not in missing]
        raise NameError(
            f"name {name!r} is not defined on process 0 (only on processes {have}); define it "
            f"on process 0 too, e.g. `{name} = ...` in a %%jax_cluster cell that every process runs"
        )
    return replies[0]


def push(group: Group, values: dict[str, Any]) -> None:
    """Set ``values`` as variables on every process.

    A value that cannot be pickled raises ``ValueError`` (one line) and nothing is sent;
    a large one is named with its size.
    """
    from ipyparallel.serialize import serialize_object

    for name, value in values.items():
        try:
            buffers = serialize_object(value)
        except Exception as exc:
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
            raise ValueError(CANNOT_PUSH.format(name=name, error=error)) from None
        note_size(f"`{name}`", sum(len(memoryview(b).cast("B")) for b in buffers), group.size)
    group.view.push(values, block=True)
