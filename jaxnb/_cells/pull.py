"""``%jax_pull`` / ``%jax_push``: values between the notebook and the engines."""

from __future__ import annotations

from typing import Any

from jaxnb._core.contract import MISSING, EngineCall
from jaxnb._core.state import Group

_FETCH = EngineCall("jaxnb._engine.values:fetch")


def pull(group: Group, name: str, timeout: float) -> Any:
    """The value of ``name`` on the engines: process 0's, a global array gathered as NumPy."""
    replies = group.view.apply_async(_FETCH, name).get(timeout=timeout)
    return choose(name, replies)


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
    """Set ``values`` as variables on every process."""
    group.view.push(values, block=True)
