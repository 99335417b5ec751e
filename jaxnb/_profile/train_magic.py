"""``%jax_train … --profile-steps A:B``: the flag's parsing, and a ``train`` that profiles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from jaxnb._profile import training


def window(text: str | None, background: bool) -> tuple[int, int] | None:
    """The steps to trace, or ``None``; a one-line ``UsageError`` for a bad value."""
    if text is None:
        return None
    if background:
        raise UsageError("--profile-steps does not go with --background; drop one of them")
    try:
        return training.parse_window(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def trainer(cluster: Any, fn: Any, name: str | None, steps: tuple[int, int]) -> Callable[..., Any]:
    """``cluster.train`` with steps ``steps`` traced on every process; the ``Result`` gets
    ``.profile`` (a ``ProfileResult``), also when the run fails."""
    from jaxnb._train.function import run_name

    def train(fn_: Any, config: Any, *, storage: str | None = None,
              on_result: Callable[[Any], None] | None = None, **options: Any) -> Any:
        seen: list[Any] = []

        def keep(result: Any) -> None:
            seen.append(result)
            if on_result is not None:
                on_result(result)

        where = training.arm(cluster.group, storage, run_name(fn, name), steps)
        try:
            return cluster.train(fn_, config, storage=storage, on_result=keep, **options)
        finally:
            profile = training.collect(cluster.group, where)
            for result in seen:
                result.profile = profile

    return train
