"""Which function a run executes, and how it travels to the engines.

A callable from the notebook is sent by value with cloudpickle (with the
notebook globals it uses; on the engines it also sees their namespace). A
string names a function already defined on the engines (by ``%%jax_cluster``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

from jaxnb._core.messages import article
from jaxnb._core.spelling import example
from jaxnb._train.sources import cell_sources

_RUN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")

NOT_A_FUNCTION = (
    "{what} is {kind}, not a function; pass a function defined in the notebook or the "
    "name (a string) of one defined on the engines"
)
CANNOT_SEND = (
    "jaxnb could not send {label} to the engines ({error}); define it in a %%jax_cluster "
    "cell and pass its name, or pass what it needs through the config"
)


def label_of(fn: Any) -> str:
    """A short name for ``fn``: its ``__name__``, or the engine-side name given."""
    if isinstance(fn, str):
        return fn
    return getattr(fn, "__name__", None) or type(fn).__name__


def run_name(fn: Any, name: str | None) -> str:
    """The run's folder name: ``name``, or the function's name (checked to be a plain name)."""
    chosen = name if name is not None else label_of(fn).rsplit(".", 1)[-1]
    if not _RUN_NAME.match(chosen) or chosen in (".", ".."):
        raise ValueError(
            f"run name {chosen!r} must be a plain folder name (letters, digits, _ . -); "
            f"pass {example('name', 'NAME')}"
        )
    return chosen


def package(fn: Any, config: Any) -> dict[str, Any]:
    """The part of the run spec that names the function and carries the config."""
    import cloudpickle

    label = label_of(fn)
    spec: dict[str, Any] = {"label": label, "pickled": None, "name": None, "config": None}
    if isinstance(fn, str):
        if not all(part.isidentifier() for part in fn.split(".")):
            raise ValueError(f"{fn!r} is not a Python name; pass a function or its name")
        spec["name"] = fn
    elif callable(fn):
        try:
            with _by_value(fn):
                spec["pickled"] = cloudpickle.dumps(fn)
            spec["sources"] = cell_sources(fn)
        except Exception as exc:
            raise ValueError(CANNOT_SEND.format(label=label, error=_short(exc))) from None
    else:
        raise ValueError(NOT_A_FUNCTION.format(what=repr(fn)[:40], kind=article(type(fn).__name__)))
    if config is not None:
        try:
            spec["config"] = cloudpickle.dumps(config)
        except Exception as exc:
            raise ValueError(
                f"jaxnb could not send the config to the engines ({_short(exc)}); "
                "use plain values (numbers, strings, lists, dicts)"
            ) from None
    return spec


@contextlib.contextmanager
def _by_value(fn: Any) -> Iterator[None]:
    """Pickle ``fn``'s module by value when it is user code the engines may not import.

    Notebook functions (``__main__``) always go by value; functions of installed
    packages go by reference (imported on the engines); a module of your own
    next to the notebook (or a test file) goes by value.
    """
    import cloudpickle

    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if module is None or module.__name__ == "__main__" or not _is_user_code(module):
        yield
        return
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _is_user_code(module: Any) -> bool:
    path = getattr(module, "__file__", None)
    if not path:
        return False
    path = os.path.realpath(path)
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots = [os.path.realpath(p) + os.sep for p in installed]
    if module.__name__.partition(".")[0] == "jaxnb":
        return False
    return not any(path.startswith(root) for root in roots)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:200]
