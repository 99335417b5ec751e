"""The function a run calls, found from the notebook's request, and its argument (the config)."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

from jaxnb._core.messages import article
from jaxnb._core.spelling import Code, bare, example
from jaxnb._engine.run import cell_sources
from jaxnb._engine.run.values import user_namespace


def function(spec: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The function to run and its arguments: none, or the config (``LookupError`` or
    ``TypeError`` with a one-line message when it does not fit)."""
    import cloudpickle

    config = cloudpickle.loads(spec["config"]) if spec.get("config") is not None else None
    if spec.get("pickled") is not None:
        fn = cloudpickle.loads(spec["pickled"])
        _see_engine_namespace(fn)
        cell_sources.restore(fn, spec.get("sources"))
    else:
        fn = _lookup(spec["name"])
    label = str(spec.get("label") or getattr(fn, "__name__", "FUNC"))
    if not callable(fn):
        raise TypeError(f"{label} is {article(type(fn).__name__)}, not a function")
    takes = _takes_config(fn, label)
    if takes is None and config is not None:
        raise TypeError(
            f"{label}() takes no arguments but a config was given; give it a parameter "
            f"(`def {label}(config): ...`) or drop {bare('config')}"
        )
    if takes is None or (takes == "optional" and config is None):
        return fn, ()
    if config is not None:
        _check_config(fn, config, label)
    return fn, ({} if config is None else config,)


#: Configs that are a single value: taken only by a function whose parameter is annotated so.
_SCALARS = (str, bytes, int, float, complex, bool)


def _check_config(fn: Callable[..., Any], config: Any, label: str) -> None:
    """Refuse a config that is one number or string unless ``fn``'s parameter is annotated to take it."""
    if not isinstance(config, _SCALARS):
        return
    kind = type(config).__name__
    try:
        param = next(iter(inspect.signature(fn).parameters.values()))
    except (TypeError, ValueError, StopIteration):
        return
    note = param.annotation
    if note is not inspect.Parameter.empty:
        if isinstance(note, type) and isinstance(config, note):
            return
        if isinstance(note, str) and re.search(rf"\b{kind}\b|\bAny\b", note):
            return
        if not isinstance(note, (type, str)):  # a Union, Any, ...: trust it
            return
    raise TypeError(
        f"{bare('config')} {config!r:.40} is {article(kind)}, but {label}() takes a config "
        f"dict: pass e.g. {example('config', Code('dict(lr=0.1)'))} (or annotate "
        f"its parameter, `{param.name}: {kind}`)"
    )


def _takes_config(fn: Callable[..., Any], label: str) -> str | None:
    """None (no parameter), "optional" or "required"; raise if it needs more than one."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return "required"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    required_kw = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if len(required) > 1 or required_kw:
        raise TypeError(
            f"{label}() must take no argument or one (the config); it needs "
            f"{', '.join(p.name for p in required + required_kw)}"
        )
    if required:
        return "required"
    if positional or any(p.kind == p.VAR_POSITIONAL for p in params):
        return "optional"
    return None


def _lookup(name: str) -> Any:
    """``name`` (dotted allowed) in this engine's namespace."""
    head, *rest = name.split(".")
    ns = user_namespace()
    if head not in ns:
        raise LookupError(
            f"{name!r} is defined neither in the notebook nor on the engines; define it in a "
            "notebook cell or in a %%jax_cluster cell first"
        )
    value = ns[head]
    for part in rest:
        value = getattr(value, part)
    return value


def _see_engine_namespace(fn: Any) -> None:
    """Let a function sent from the notebook also see names defined on the engines.

    Its own (notebook) globals come first; names it uses that the notebook
    does not define are looked up in the engine's namespace.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    g = getattr(fn, "__globals__", None)
    if g is None or (module is not None and g is vars(module)):
        return
    for key, value in user_namespace().items():
        g.setdefault(key, value)
